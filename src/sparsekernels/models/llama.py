"""A Llama-shaped decoder block stack (RMSNorm, GQA attention with RoPE and a KV cache, SwiGLU
MLP; q/k/v and gate/up projections fused, as serving stacks keep them) for decode benchmarks:
no embeddings or vocabulary head, only the blocks whose weights a sparse format shrinks.
Generation feeds each step's final hidden state back as the next input.

Besides its products, a decode step at batch 1 is mostly small launches, the same on the dense and
the sparse model. On CUDA without autograd the stack fuses them as serving stacks do: each residual
add into the norm after it (kernels/rms_norm.py), the rotation of q and k with both cache writes
(kernels/rope_cache.py), SwiGLU's gate (kernels/swiglu.py); elsewhere it runs torch's ops.

The default sizes are Llama-3-8B's (hidden 4096, MLP 14336, 32 heads, 8 KV heads) with 4 layers,
so a benchmark fits in minutes; tests use tiny configs (hidden 64).

Example:
    >>> cfg = LlamaConfig(hidden=64, intermediate=224, heads=4, kv_heads=2, layers=2)
    >>> model = LlamaStack(cfg)
    >>> model.allocate_cache(batch=2, max_len=16)
    >>> model.generate(torch.randn(2, 4, 64), steps=3).shape
    torch.Size([2, 3, 64])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks
from ..kernels import rms_norm as rms_norm_kernel
from ..kernels import rope_cache as rope_cache_kernel
from ..kernels import swiglu as swiglu_kernel


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    layers: int = 4
    rope_theta: float = 500000.0
    eps: float = 1e-5

    def __post_init__(self) -> None:
        # (stored as Python numbers, NumPy scalars converted: repr and sizes read the same)
        for name in ("hidden", "intermediate", "heads", "kv_heads", "layers"):
            value = getattr(self, name)
            if not _checks.is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise ValueError(
                f"hidden {self.hidden} must be heads {self.heads} times an even head size "
                "(RoPE rotates pairs)"
            )
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads}")
        for name in ("rope_theta", "eps"):
            value = _checks.finite_number(name, getattr(self, name))
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
            object.__setattr__(self, name, value)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    """torch's RMSNorm: one fused kernel on CUDA (aten::_fused_rms_norm), sums in float32.
    The composed form (casts, square, mean, rsqrt, two products) launched a small kernel for
    each, in the 9 norms of a decode step of the 4-layer stack, on the dense and the sparse
    side alike (results/nvidia-h200/2026-11-30/at-94ee33f/llama_profile.txt)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.add(x, None)[1]

    def add(self, x: torch.Tensor, delta: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, the norm of it); delta None: (x, its norm). Without autograd on CUDA,
        one kernel (kernels/rms_norm.py): torch's fused norm took ~6 us a decode row."""
        fused = x.is_cuda and not torch.is_grad_enabled() and rms_norm_kernel.supports(x)
        if fused and (delta is None or delta.dtype == x.dtype):  # (autocast may mix them)
            return rms_norm_kernel.rms_norm(x, self.weight, self.eps, delta)
        total = x if delta is None else x + delta
        return total, F.rms_norm(total, (x.shape[-1],), self.weight, self.eps)


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the rotate-half form, x * cos + cat(-x2, x1) * sin, with the sign
    folded into signed_sin = cat(-sin, sin) (LlamaStack.allocate_cache): three kernels (cat,
    product, addcmul) where the composed form launched five. A decode step is latency-bound,
    each small kernel ~2 us in a CUDA graph, on the dense and the sparse side alike."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), -1)
    return torch.addcmul(x * cos, swapped, signed_sin)


class Attention(nn.Module):
    """Grouped-query attention over a preallocated KV cache (see LlamaStack.allocate_cache)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg, d = cfg, cfg.head_dim
        # q, k and v projections in one weight, as serving stacks keep them (vLLM's
        # QKVParallelLinear): one product a step instead of three small ones.
        self.qkv_proj = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)
        self.cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor, start: int, cos, signed_sin) -> torch.Tensor:
        B, T, _ = x.shape
        cfg, d = self.cfg, self.cfg.head_dim
        if T > 1 and start != 0:
            raise ValueError("several new tokens are supported only from position 0 (prefill)")
        qkv = self.qkv_proj(x)
        k_cache, v_cache = self.cache
        same = k_cache.dtype == cos.dtype == qkv.dtype  # (not under autocast's bf16 qkv)
        if (
            qkv.is_cuda
            and not torch.is_grad_enabled()
            and same
            and rope_cache_kernel.supports(qkv, d)
        ):
            # one launch for the rotation and both cache writes (kernels/rope_cache.py)
            q = rope_cache_kernel.rope_cache(
                qkv, cos, signed_sin, k_cache, v_cache, start, cfg.heads, cfg.kv_heads
            )
        else:
            qk, v = qkv.split([(cfg.heads + cfg.kv_heads) * d, cfg.kv_heads * d], -1)
            # q and k rotated together: one rotary pass a layer instead of two
            heads = qk.view(B, T, cfg.heads + cfg.kv_heads, d)
            qk = _rope(heads, cos[:, None], signed_sin[:, None])
            q = qk[:, :, : cfg.heads].transpose(1, 2)
            k_cache[:B, :, start : start + T] = qk[:, :, cfg.heads :].transpose(1, 2)
            v_cache[:B, :, start : start + T] = v.view(B, T, cfg.kv_heads, d).transpose(1, 2)
        k, v = k_cache[:B, :, : start + T], v_cache[:B, :, : start + T]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, cfg.heads * d))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), gate and up in one weight (as serving stacks keep
    them: vLLM's MergedColumnParallelLinear)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden, 2 * cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if gate_up.is_cuda and not torch.is_grad_enabled() and swiglu_kernel.supports(gate_up):
            return self.down_proj(swiglu_kernel.swiglu(gate_up))  # one launch for two
        gate, up = gate_up.chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.attn = Attention(cfg)
        self.post_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, start: int, cos, signed_sin) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), start, cos, signed_sin)
        return x + self.mlp(self.post_norm(x))

    def fused(self, x, normed, next_norm: RMSNorm, start: int, cos, signed_sin):
        """forward with each residual add fused into the norm after it (the next block's
        input norm, or the stack's last): takes x and input_norm(x), returns the output and
        next_norm of it."""
        x, normed = self.post_norm.add(x, self.attn(normed, start, cos, signed_sin))
        return next_norm.add(x, self.mlp(normed))


class LlamaStack(nn.Module):
    """`layers` decoder blocks and a final RMSNorm over hidden states (batch, tokens, hidden)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        for p in self.parameters():  # Llama's init scale; keeps bf16 activations in range
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def allocate_cache(self, batch: int, max_len: int) -> None:
        """KV caches for `batch` sequences of up to `max_len` tokens, in the weights' dtype
        and on their device (again after a `.to(...)`)."""
        batch = _checks.positive_int("batch", batch)
        max_len = _checks.positive_int("max_len", max_len)
        cfg, p = self.cfg, self.norm.weight
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        for layer in self.layers:
            layer.attn.cache = (p.new_zeros(shape), p.new_zeros(shape))
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).double() / cfg.head_dim)
        angles = torch.arange(max_len).double()[:, None] * inv[None, :]
        angles = torch.cat((angles, angles), -1).to(device=p.device)
        sin = angles.sin()
        signed_sin = torch.cat((-sin[:, : cfg.head_dim // 2], sin[:, cfg.head_dim // 2 :]), -1)
        self._cos, self._signed_sin = angles.cos().to(p.dtype), signed_sin.to(p.dtype)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        T = x.shape[1]
        start = self._check_room(x, start, T)
        cos, signed_sin = self._cos[start : start + T], self._signed_sin[start : start + T]
        nexts = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        x, normed = (self.layers[0].input_norm if self.layers else self.norm).add(x, None)
        for layer, next_norm in zip(self.layers, nexts, strict=True):
            x, normed = layer.fused(x, normed, next_norm, start, cos, signed_sin)
        return normed

    def _check_room(self, x: torch.Tensor, start: int, tokens: int) -> int:
        """A clear error where the caches cannot take these tokens (before any work); returns
        start as a Python int (a NumPy integer converted)."""
        if not hasattr(self, "_cos"):
            raise ValueError("call allocate_cache(batch, max_len) before running the stack")
        weight = self.norm.weight
        if (self._cos.dtype, self._cos.device) != (weight.dtype, weight.device):
            raise ValueError(
                f"the caches are {self._cos.dtype} on {self._cos.device}, the weights "
                f"{weight.dtype} on {weight.device}: call allocate_cache again after .to()"
            )
        if x.dim() != 3 or x.shape[-1] != self.cfg.hidden:
            raise ValueError(f"x must be (batch, tokens, {self.cfg.hidden}), got {tuple(x.shape)}")
        if not _checks.is_int(start) or start < 0:
            raise ValueError(f"start must be an int >= 0, got {start!r}")
        start = int(start)
        if x.shape[1] < 1:
            raise ValueError(f"x must hold at least one token, got {tuple(x.shape)}")
        cache = self.layers[0].attn.cache if self.layers else None
        batch, max_len = (cache[0].shape[0], cache[0].shape[2]) if cache else (None, None)
        if batch is not None and x.shape[0] > batch:
            raise ValueError(f"batch {x.shape[0]} is larger than the caches' {batch}")
        if max_len is not None and start + tokens > max_len:
            raise ValueError(
                f"positions up to {start + tokens} pass the caches' max_len {max_len} "
                "(allocate_cache with a longer max_len)"
            )
        return start

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int) -> torch.Tensor:
        """Prefill `prompt` (batch, P, hidden), then decode `steps` tokens one at a time."""
        if not _checks.is_int(steps) or steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {steps!r}")
        steps = int(steps)
        self._check_room(prompt, 0, prompt.shape[1] + steps)  # (the steps' tokens are kept)
        x = self(prompt, 0)[:, -1:]
        return self.decode(x, prompt.shape[1], steps)

    @torch.no_grad()
    def decode(self, x: torch.Tensor, start: int, steps: int) -> torch.Tensor:
        """`steps` decode steps from position `start` (the cache holds positions before it);
        x (batch, 1, hidden) is the first input. Returns every step's output."""
        if not _checks.is_int(steps) or steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {steps!r}")
        steps = int(steps)
        start = self._check_room(x, start, steps)
        if x.shape[1] != 1:
            raise ValueError(
                f"x must be one token a sequence (batch, 1, hidden), got {tuple(x.shape)}"
            )
        outs = []
        for i in range(steps):
            x = self(x, start + i)
            outs.append(x)
        return torch.cat(outs, 1)
