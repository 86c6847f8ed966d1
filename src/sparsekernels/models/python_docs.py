"""Prose sentences from the Python documentation that ships with every Python
(`pydoc_data.topics`): offline, varied English text for distillation, where the dense teacher
labels any input. Added to the calibration sentences and their word-mixes, it lifted 2:4
distillation of all-MiniLM-L6-v2 (benchmarks/results/cpu/2026-11-30-layers/).
"""

from __future__ import annotations

import functools
import re

# Lines of code and markup, not prose: assignments, calls, brackets, literals, reST roles.
_CODE = re.compile(r"[=_(){}\[\]<>*`|#]|\.\.\.|::|--")


@functools.cache
def python_doc_sentences(min_words: int = 6, max_words: int = 30) -> tuple[str, ...]:
    """The documentation's prose sentences of `min_words` to `max_words` words that start with
    a capital and hold no code characters, sorted and without repeats (about 750 on Python
    3.11)."""
    import pydoc_data.topics

    text = re.sub(r"\s+", " ", " ".join(pydoc_data.topics.topics.values()))
    found = {
        s
        for s in re.split(r"(?<=[.!?])\s+", text)
        if min_words <= len(s.split()) <= max_words and s[0].isupper() and not _CODE.search(s)
    }
    return tuple(sorted(found))
