"""The demo's bundled sentences: query/answer pairs for a retrieval check, plus distractors.

Every sentence is embedded; the cosine similarity of each sparse embedding to the dense one is
the quality measure. For retrieval, each query is matched against all passages (the answers and
the distractors) and must find its own answer first. Some distractors share a topic or words
with a query, so the check is not trivially easy.
"""

from __future__ import annotations

PAIRS: tuple[tuple[str, str], ...] = (
    (
        "How do plants make food from sunlight?",
        "Photosynthesis lets green plants turn light, water and carbon dioxide into sugar.",
    ),
    (
        "What is the tallest mountain in the world?",
        "Mount Everest, on the border of Nepal and China, rises 8,849 metres above sea level.",
    ),
    (
        "Which language should I learn to build websites?",
        "JavaScript runs in every web browser and is the language of interactive web pages.",
    ),
    (
        "How can I keep my bread from going stale?",
        "Keep the loaf in a paper bag at room temperature, or freeze slices you will not eat soon.",
    ),
    (
        "Why is the sky blue during the day?",
        "Air molecules scatter short blue wavelengths of sunlight more than red ones.",
    ),
    (
        "What should I do if my laptop battery drains quickly?",
        "Lower the screen brightness and close background apps to make the battery last longer.",
    ),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci painted the famous portrait in Florence in the early sixteenth century.",
    ),
    (
        "How often should I water a cactus?",
        "Cacti need water only every two to three weeks, and even less in winter.",
    ),
    (
        "What causes earthquakes?",
        "Earthquakes happen when tectonic plates slip past each other and release built-up stress.",
    ),
    (
        "How do vaccines protect us from disease?",
        "A vaccine trains the immune system to recognise a germ before a real infection occurs.",
    ),
)

DISTRACTORS: tuple[str, ...] = (
    "Solar panels convert sunlight directly into electricity.",
    "The Alps stretch across eight countries in central Europe.",
    "Python is popular for data analysis and machine learning.",
    "A sourdough starter needs to be fed with flour and water every day.",
    "Sunsets look red because light travels through more air near the horizon.",
    "The new phone has a bigger screen and a faster processor.",
    "Vincent van Gogh painted The Starry Night while staying in Saint-Remy.",
    "Tomato plants grow best with plenty of sun and regular watering.",
    "Volcanoes form where magma rises through cracks in the crust.",
    "Washing your hands with soap removes most germs.",
    "The football match was postponed because of heavy rain.",
    "She bought a second-hand bicycle to ride to work.",
    "The museum is closed on Mondays and public holidays.",
    "Our flight to Lisbon was delayed by two hours.",
    "He learned to play the guitar by watching online videos.",
    "The library lends e-books as well as printed ones.",
    "A good night's sleep improves memory and concentration.",
    "The committee will announce its decision next week.",
    "Whales communicate with each other using complex songs.",
    "The bakery on the corner sells fresh croissants every morning.",
)

QUERIES: tuple[str, ...] = tuple(q for q, _ in PAIRS)
PASSAGES: tuple[str, ...] = tuple(a for _, a in PAIRS) + DISTRACTORS
# The passage index each query should retrieve first.
ANSWER_OF_QUERY: tuple[int, ...] = tuple(range(len(PAIRS)))
SENTENCES: tuple[str, ...] = QUERIES + PASSAGES
