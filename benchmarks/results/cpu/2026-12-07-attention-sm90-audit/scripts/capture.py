"""Capture the Triton launches of the fused block-sparse attention (forward + backward) for the
Sparse Transformer case (L = 8192, H = 8, D = 64, bf16, B = 1, packed qkv (B, L, 3, H, D)),
exactly as the library's op bodies launch them on a GPU, without running anything.

- The op bodies are called directly: ops/_attention_library.block_attention_forward (on the
  packed views) and block_attention_backward_body(..., packed_grad=...), as
  block_attention_packed and its backward do.
- Tensors live on the CPU (64-byte aligned allocations, as the GPU's are at least 16-byte
  aligned); `_dot_flags` is replaced by its CUDA answer (UPCAST False, PRECISION "tf32" for
  bf16: the CPU-only upcast is the interpreter's workaround).
- JITFunction.run is replaced by a capture that uses Triton 3.6's own binder for
  GPUTarget("cuda", 90, 32): signature, constexprs, specialization attrs (tt.divisibility 16 on
  pointers and ints divisible by 16, ints equal to 1 as constexpr) and options are what a real
  launch would compile.

    PYTHONPATH=/tmp/t36:/work/main/.venv/lib/python3.11/site-packages:/work/main/src \
        /work/main/.venv/bin/python capture.py   -> launches.pkl, launches.txt
"""

import math
import os
import pickle
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

import sparsekernels as sk  # noqa: E402
from sparsekernels.formats import _block_layout  # noqa: E402
from sparsekernels.kernels import attention_block, attention_block_backward  # noqa: E402
from sparsekernels.kernels.attention_tuning import (  # noqa: E402
    BLOCK_ATTENTION_SPLIT_FILL,
    block_attention_config,
)
from sparsekernels.ops import _attention_library as lib  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/attn_audit"))
TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
B, L, H, D = 1, 8192, 8, 64
launches = []
_BINDERS = {}
tag = {"v": ""}


def fake_run(self, *args, grid, warmup, **kwargs):
    kwargs["debug"] = kwargs.get("debug", self.debug) or False
    kwargs["instrumentation_mode"] = ""
    binder = _BINDERS.get(id(self))
    if binder is None:
        binder = create_function_from_signature(self.signature, self.params, BACKEND)
        _BINDERS[id(self)] = binder
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = self._pack_args(
        BACKEND, kwargs, bound, specialization, options
    )
    launches.append(
        dict(
            tag=tag["v"],
            module=self.fn.__module__,
            name=self.fn.__name__,
            signature=signature,
            constexprs={
                k: (f"tl.{v.name}" if isinstance(v, tl.dtype) else v)
                for k, v in constexprs.items()
            },
            attrs=attrs,
            options={"num_warps": options.num_warps, "num_stages": options.num_stages,
                     **({"maxnreg": options.maxnreg} if options.maxnreg else {})},
            grid=tuple(int(g) for g in grid),
        )
    )


JITFunction.run = fake_run


def cuda_dot_flags(q):  # kernels/attention_block._dot_flags on a CUDA tensor
    return {"PRECISION": "ieee" if q.dtype == torch.float32 else "tf32", "UPCAST": False}


attention_block._dot_flags = cuda_dot_flags
attention_block_backward._dot_flags = cuda_dot_flags

pattern = sk.nn.SparseAttention.local_strided(L, window=128, stride=128).pattern
rows, cols = pattern.pattern.row_indices().long(), pattern.column_indices.long()
qkv = torch.zeros(B, L, 3, H, D, dtype=torch.bfloat16)
q, k, v = lib.packed_views(qkv)
scale = 1 / math.sqrt(D)
base = block_attention_config(D, on_cpu=False).as_list()
print("library config (H100/H200, D=64):", base)
CONFIGS = {
    "base": base,  # [64, 64, 4, 3, 4, 2]
    "m128w8": [128, 64, 8, 3, 8, 2],
    "m128w4": [128, 64, 4, 3, 4, 2],
    "bwd_s1": [64, 64, 4, 3, 4, 1],
    "bwd_s3": [64, 64, 4, 3, 4, 3],
    "fwd_s2": [64, 64, 4, 2, 4, 2],
    "s4": [64, 64, 4, 4, 4, 4],  # extra: does a deeper pipeline prefetch K/V 2 tiles ahead?
}
layouts = {}
for name, config in CONFIGS.items():
    bm, bn = config[:2]
    if (bm, bn) not in layouts:
        layouts[bm, bn] = _block_layout.build(rows, cols, (L, L), bm, bn, BLOCK_ATTENTION_SPLIT_FILL)
    layout = layouts[bm, bn]
    tensors = layout.tensors()
    print(name, config, "components:",
          [(c.row_perm is not None, c.tiles, c.partial) for c in layout.components])
    tag["v"] = name
    out, lse = lib.block_attention_forward(q, k, v, tensors, scale, config)
    grad = torch.zeros_like(out)  # out's (B, L, H, D) layout, as the reshape's gradient is
    d_qkv = torch.empty_like(qkv)
    lib.block_attention_backward_body(q, k, v, out, lse, grad, tensors, scale, config, d_qkv)

with open(OUT / "launches.pkl", "wb") as f:
    pickle.dump(launches, f)
with open(OUT / "launches.txt", "w") as f:
    for i, la in enumerate(launches):
        f.write(f"[{i}] {la['tag']} {la['name']} grid={la['grid']} options={la['options']}\n")
        f.write(f"   constexprs={la['constexprs']}\n   signature={la['signature']}\n")
        f.write(f"   attrs={la['attrs']}\n")
print(len(launches), "launches")
sys.exit(0)
