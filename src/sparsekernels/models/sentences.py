"""The demo's bundled sentences: query/answer pairs for a retrieval check, plus distractors.

Every sentence is embedded; the cosine similarity of each sparse embedding to the dense one is
the quality measure. For retrieval, each query is matched against all passages (the answers and
the distractors) and must find its own answer first. Some distractors share a topic or words
with a query, so the check is not trivially easy.

CALIBRATION holds separate sentences of general text that activation-aware pruning (Wanda) runs
through the dense model to measure its activations; none of them is evaluated, so the quality
numbers are not measured on the data the masks were chosen from.
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

# Wanda's calibration data: general text, distinct from every evaluated sentence above.
CALIBRATION: tuple[str, ...] = (
    "The train to the coast leaves every hour from the central station.",
    "She planted tomatoes and basil in the small garden behind her house.",
    "Scientists measured the temperature of the ocean at different depths.",
    "The museum opens a new exhibition of early photographs next month.",
    "He repaired the old bicycle with parts he found in the garage.",
    "Heavy rain flooded several streets in the northern part of the city.",
    "The orchestra rehearsed the symphony for three weeks before the concert.",
    "Our neighbours adopted a young cat from the animal shelter.",
    "The company reported higher profits after a strong holiday season.",
    "Children learn new words quickly when they hear them in stories.",
    "A thick fog covered the valley until the late morning.",
    "The library extended its opening hours during the exam period.",
    "Farmers harvest the wheat at the end of the summer.",
    "The software update fixed a bug that made the application crash.",
    "Volunteers cleaned the beach and collected bags of plastic waste.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Astronomers discovered a planet orbiting a distant star.",
    "The city council approved a plan to build more bicycle lanes.",
    "My grandmother tells stories about the village where she grew up.",
    "The hikers reached the summit just before the storm arrived.",
    "Regular exercise improves sleep and reduces stress.",
    "The bridge was closed for repairs for most of the year.",
    "Students presented their research projects at the science fair.",
    "The river freezes in winter and people skate on the ice.",
    "A new cafe opened across the street from the bookshop.",
    "The pilot announced that the flight would land twenty minutes early.",
    "Engineers tested the engine under extreme heat and pressure.",
    "The teacher asked the class to write a short essay about friendship.",
    "Prices of fresh vegetables rose after a dry summer.",
    "The football match was postponed because of the snow.",
    "Old letters found in the attic revealed the history of the family.",
    "The market sells cheese, bread and honey from local farms.",
)
