"""SparsityConfig: which sparsity a layer gets, and the shorthand strings that name one.

Shorthands: "90%" or "0.9" (unstructured, stored as CSR), "2:8" (N:M along in_features),
"2:8,v=64" (vector-wise: 64 output rows share a choice), "4:8,v=4,b=4" (block-wise),
",format=csr" to store an N:M mask as CSR, and ",method=wanda" to score by |W| times the input
activation norm or ",method=sparsegpt" to prune with SparseGPT's error compensation (both need
calibration data, see sparsify_) instead of by magnitude, the default. "nonzero" keeps a pruned
checkpoint's nonzeros as they are (each layer's own sparsity, CSR), and "2:4,method=nonzero"
stores them as N:M, refusing a weight whose nonzeros do not fit the pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import torch

from .. import _checks
from ..formats import CSRMatrix, NMMatrix
from .masks import magnitude_mask, nm_mask
from .sparsegpt import sparsegpt_prune
from .wanda import wanda_mask

FORMATS = ("csr", "nm")
# how weights are chosen (and updated) for pruning; "nonzero": as they are (pruned already)
METHODS = ("magnitude", "wanda", "sparsegpt", "nonzero")
_EXAMPLES = "e.g. '2:8', '90%', '0.9', '2:8,v=64', '4:8,v=4,b=4' or 'nonzero'"
_KEYS = {
    "v": "vector",
    "vector": "vector",
    "b": "block",
    "block": "block",
    "format": "format",
    "method": "method",
}


@dataclass(frozen=True)
class SparsityConfig:
    """Unstructured (`sparsity`, format "csr") or N:M (`n`, `m`, `vector`, `block`).

    `format` defaults to "nm" when n:m is given and to "csr" otherwise; an N:M mask may also be
    stored as CSR (format="csr"), but unstructured sparsity cannot be stored as N:M.

    `method` says how weights are chosen: "magnitude" (|W|, over the whole weight for
    unstructured), "wanda" (|W| times the input feature's activation norm, compared within
    each output row) or "sparsegpt" (SparseGPT: chosen by OBS saliency column block by column
    block, the kept weights updated to make up for the pruned ones). Wanda and SparseGPT need
    calibration data, see sparsify_. "nonzero" keeps the weight's nonzeros (a checkpoint pruned
    elsewhere): unstructured without a sparsity (each weight's own), or N:M where they fit it.

    Example:
        >>> SparsityConfig.parse("2:8,v=64")
        SparsityConfig(format='nm', sparsity=None, n=2, m=8, vector=64, block=1, method='magnitude')
    """

    format: str | None = None
    sparsity: float | None = None
    n: int | None = None
    m: int | None = None
    vector: int = 1
    block: int = 1
    method: str = "magnitude"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(
                f"method must be 'magnitude', 'wanda', 'sparsegpt' or 'nonzero', "
                f"got {self.method!r}"
            )
        structured = self.n is not None or self.m is not None
        if structured and self.sparsity is not None:
            raise ValueError("give either sparsity (unstructured) or n and m (N:M), not both")
        nonzero = self.method == "nonzero"
        if not structured and nonzero and self.sparsity is not None:
            raise ValueError("method 'nonzero' keeps each weight's own nonzeros: give no sparsity")
        if not structured and self.sparsity is None and not nonzero:
            raise ValueError("give a sparsity (unstructured) or n and m (N:M)")
        fmt = self.format if self.format is not None else ("nm" if structured else "csr")
        if fmt not in FORMATS:
            raise ValueError(f"format must be 'csr' or 'nm', got {self.format!r}")
        object.__setattr__(self, "format", fmt)
        # Numbers are stored as Python's (a NumPy scalar converted): the config's repr, label
        # and equality, and what is saved from it, read the same whichever was given.
        for name in ("vector", "block"):
            value = getattr(self, name)
            if not _checks.is_int(value) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        if not structured:
            s = 0.0 if nonzero else self.sparsity
            if not _checks.is_real(s) or not 0 <= s < 1:
                raise ValueError(f"sparsity must be a number in [0, 1), got {s!r}")
            if not nonzero:
                object.__setattr__(self, "sparsity", float(s))
            if fmt == "nm":
                raise ValueError(
                    "format 'nm' needs n and m; unstructured sparsity is stored as CSR"
                )
            if self.vector != 1 or self.block != 1:
                raise ValueError("vector and block apply to N:M patterns only (give n and m)")
            return
        for name in ("n", "m"):
            value = getattr(self, name)
            if not _checks.is_int(value):
                raise ValueError(f"{name} must be an int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if not 1 <= self.n < self.m <= 256:
            raise ValueError(f"N:M needs 1 <= n < m <= 256, got {self.n}:{self.m}")
        if self.n % self.block or self.m % self.block:
            raise ValueError(
                f"block must divide n and m, got block={self.block} for {self.n}:{self.m}"
            )

    # ----------------------------------------------------------------- parsing
    @classmethod
    def parse(cls, text: str) -> SparsityConfig:
        """A config from a shorthand: "2:8", "90%", "0.9", "2:8,v=64", "4:8,v=4,b=4"."""
        if not isinstance(text, str):
            raise TypeError(f"a sparsity shorthand must be a str, got {type(text).__name__}")
        parts = [p.strip() for p in text.split(",")]
        if not parts[0]:
            raise ValueError(f"empty sparsity shorthand {text!r}; expected {_EXAMPLES}")
        head, options = parts[0], {}
        for part in parts[1:]:
            key, sep, value = (s.strip() for s in part.partition("="))
            if not sep or not key or not value:
                raise ValueError(
                    f"{text!r}: option {part!r} must look like key=value ({_EXAMPLES})"
                )
            if key.lower() not in _KEYS:
                raise ValueError(
                    f"{text!r}: unknown option {key!r}; use v=, b=, format= or method="
                )
            name = _KEYS[key.lower()]
            if name in options:
                raise ValueError(f"{text!r}: option {name} is given twice")
            if name in ("format", "method"):
                options[name] = value.lower()
            elif re.fullmatch(r"\d+", value):
                options[name] = int(value)
            else:
                raise ValueError(f"{text!r}: {name} must be a positive integer, got {value!r}")
        if head.lower() == "nonzero":
            if {"vector", "block", "method"} & set(options):
                raise ValueError(f"{text!r}: 'nonzero' takes format= only ('2:4,method=nonzero' "
                                 "for N:M)")  # fmt: skip
            return cls(method="nonzero", **options)
        if ":" in head:
            n, _, m = head.partition(":")
            if not (re.fullmatch(r"\s*\d+\s*", n) and re.fullmatch(r"\s*\d+\s*", m)):
                raise ValueError(f"{text!r}: an N:M pattern must be two integers like '2:8'")
            return cls(n=int(n), m=int(m), **options)
        if {"vector", "block"} & set(options):
            raise ValueError(f"{text!r}: v= and b= need an N:M pattern such as '2:8,v=64'")
        return cls(sparsity=_parse_sparsity(text, head), **options)

    @classmethod
    def coerce(cls, config: SparsityConfig | str | float) -> SparsityConfig:
        """A SparsityConfig from a config, a shorthand string or a sparsity in [0, 1)."""
        if isinstance(config, SparsityConfig):
            return config
        if isinstance(config, str):
            return cls.parse(config)
        if _checks.is_real(config):
            return cls(sparsity=float(config))
        raise TypeError(
            f"config must be a SparsityConfig, a shorthand string or a sparsity, "
            f"got {type(config).__name__}"
        )

    # ----------------------------------------------------------------- description
    @property
    def structured(self) -> bool:
        return self.n is not None

    @property
    def density(self) -> float | None:
        """Fraction of weights kept (None for unstructured "nonzero": each weight's own)."""
        if self.structured:
            return self.n / self.m
        return None if self.sparsity is None else 1.0 - self.sparsity

    @property
    def label(self) -> str:
        """The shorthand that parses back to this config."""
        method = "" if self.method == "magnitude" else f",method={self.method}"
        if not self.structured and self.sparsity is None:
            return "nonzero"
        if not self.structured:
            percent = f"{self.sparsity * 100:.15g}%"  # (as given, where it parses back exactly)
            exact = _parse_sparsity(percent, percent) == self.sparsity
            return f"{percent if exact else repr(self.sparsity)}{method}"
        extra = "".join(f",{k}={v}" for k, v in (("v", self.vector), ("b", self.block)) if v != 1)
        fmt = ",format=csr" if self.format == "csr" else ""
        return f"{self.n}:{self.m}{extra}{fmt}{method}"

    def __str__(self) -> str:
        return self.label

    # ----------------------------------------------------------------- use
    def unsupported_reason(self, shape: tuple[int, int]) -> str | None:
        """Why a weight of `shape` (out_features, in_features) cannot take this config, or None."""
        if self.structured and shape[1] % self.m:
            return f"in_features {shape[1]} is not a multiple of m={self.m}"
        return None

    @property
    def needs_calibration(self) -> bool:
        return self.method in ("wanda", "sparsegpt")

    @property
    def pattern_kwargs(self) -> dict:
        """The pattern as keyword arguments of the mask functions: sparsity, or n, m, vector
        and block."""
        if self.structured:
            return {"n": self.n, "m": self.m, "vector": self.vector, "block": self.block}
        return {"sparsity": self.sparsity}

    def mask(self, weight: torch.Tensor, input_norm: torch.Tensor | None = None) -> torch.Tensor:
        """Which entries of a 2-D weight this config keeps (bool, weight's shape): by magnitude,
        or for method "wanda" by |weight| * input_norm (in_features,) within each row. Method
        "sparsegpt" changes the kept weights too: use prune()."""
        if self.method == "sparsegpt":
            raise ValueError(
                "method 'sparsegpt' updates the kept weights as well as choosing them: use "
                "sparsify_(..., calibration=) or config.prune(weight, hessian=), or pass mask="
            )
        if self.method == "wanda":
            if input_norm is None:
                raise ValueError(
                    "method 'wanda' needs input_norm (the input features' activation norms): "
                    "use sparsify_(..., calibration=) or pass mask="
                )
            return wanda_mask(weight, input_norm, **self.pattern_kwargs)
        if input_norm is not None:
            how = "keeps the nonzeros" if self.method == "nonzero" else "prunes by magnitude"
            raise ValueError(f"input_norm is for method 'wanda'; this config {how}")
        if self.method == "nonzero":
            return self._nonzero_mask(weight)
        if self.structured:
            return nm_mask(weight, self.n, self.m, vector=self.vector, block=self.block)
        return magnitude_mask(weight, self.sparsity)

    def _nonzero_mask(self, weight: torch.Tensor) -> torch.Tensor:
        """The nonzeros; for N:M, the pattern's choice by magnitude, which keeps every nonzero
        where they fit it (up to n a group: zeros fill the rest), else a ValueError."""
        nonzero = weight.detach() != 0
        if not self.structured:
            return nonzero
        mask = nm_mask(weight, self.n, self.m, vector=self.vector, block=self.block)
        dropped = int((nonzero & ~mask).sum())
        if dropped:
            raise ValueError(
                f"the weight's nonzeros do not fit {self.n}:{self.m}"
                + (
                    f" (vector={self.vector}, block={self.block})"
                    if self.vector * self.block > 1
                    else ""
                )  # fmt: skip
                + f": the pattern would drop {dropped} of {int(nonzero.sum())}; pick the "
                "pattern it was pruned to, or 'nonzero' for CSR"
            )
        return mask

    def prune(
        self,
        weight: torch.Tensor,
        input_norm: torch.Tensor | None = None,
        hessian: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(pruned weight, mask) for a 2-D weight by this config's method: zeros where the mask
        is False; for "sparsegpt" (which needs `hessian`, the inputs' X^T X, see
        sparsegpt_prune) the kept weights are updated too. "wanda" needs `input_norm`."""
        if self.method == "sparsegpt":
            if hessian is None:
                raise ValueError(
                    "method 'sparsegpt' needs hessian (X^T X of the layer's calibration inputs): "
                    "use sparsify_(..., calibration=)"
                )
            if input_norm is not None:
                raise ValueError("input_norm is for method 'wanda'; this config uses SparseGPT")
            return sparsegpt_prune(weight, hessian, **self.pattern_kwargs)
        if hessian is not None:
            raise ValueError(f"hessian is for method 'sparsegpt'; this config uses {self.method}")
        mask = self.mask(weight, input_norm)
        return weight.detach().masked_fill(~mask, 0), mask

    def compress(
        self, weight: torch.Tensor, mask: torch.Tensor | None = None
    ) -> CSRMatrix | NMMatrix:
        """The weight pruned by this config's method (or at `mask`) in this config's format."""
        reason = self.unsupported_reason(tuple(weight.shape))
        if reason is not None:
            raise ValueError(
                f"cannot apply {self.label} to a weight of shape {tuple(weight.shape)}: {reason}"
            )
        mask = self.mask(weight) if mask is None else mask
        weight = weight.detach()
        if self.format == "csr":
            return CSRMatrix.from_dense(weight, mask=mask)
        return NMMatrix.from_dense(
            weight, self.n, self.m, vector=self.vector, block=self.block, mask=mask
        )


def _parse_sparsity(text: str, head: str) -> float:
    percent = head.endswith("%")
    number = head[:-1].strip() if percent else head
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r}: not a sparsity shorthand; expected {_EXAMPLES}") from None
    if percent:
        if not 0 <= value < 100:
            raise ValueError(f"{text!r}: a sparsity percentage must be in [0, 100)")
        return value / 100
    if not 0 <= value < 1:
        hint = f"; write '{number}%' for a percentage" if 1 <= value < 100 else ""
        raise ValueError(f"{text!r}: sparsity must be in [0, 1){hint}")
    return value


def resolve(
    sparsity: float | str | None = None,
    pattern: str | SparsityConfig | None = None,
    vector: int | None = None,
    block: int | None = None,
    format: str | None = None,
) -> SparsityConfig:
    """The config that `from_dense(..., sparsity=, pattern=, vector=, block=, format=)` asks for.

    Exactly one of `sparsity` (0.9 or "90%") and `pattern` ("2:8", "2:8,v=64" or a
    SparsityConfig) is given; vector, block and format override what the pattern says.
    """
    if (sparsity is None) == (pattern is None):
        raise ValueError("give exactly one of sparsity= (e.g. 0.9) or pattern= (e.g. '2:8')")
    if pattern is not None:
        config = SparsityConfig.coerce(pattern)
    elif isinstance(sparsity, SparsityConfig):
        raise TypeError("pass a SparsityConfig as pattern=, not sparsity=")
    else:
        config = SparsityConfig.coerce(sparsity)
    if pattern is not None and isinstance(pattern, str) and not config.structured:
        raise ValueError(f"pattern must be N:M like '2:8', got {pattern!r}; use sparsity= instead")
    overrides = {"vector": vector, "block": block, "format": format}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, **overrides) if overrides else config
