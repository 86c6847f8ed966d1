"""python_doc_sentences: offline prose for distillation."""

from sparsekernels.models.python_docs import python_doc_sentences


def test_prose_sentences_only():
    sentences = python_doc_sentences()
    assert len(sentences) > 300  # ~750 on Python 3.11; the docs change a little per version
    assert list(sentences) == sorted(set(sentences))
    for s in sentences:
        assert 6 <= len(s.split()) <= 30 and s[0].isupper()
        assert not any(c in s for c in "=_(){}[]<>*`|#"), s
    short = python_doc_sentences(3, 5)
    assert short and all(3 <= len(s.split()) <= 5 for s in short)
