"""End-to-end cases: whole models, our sparse one (`sk_model`) against the dense one (`dense`).

Each case builds both models from one initialisation (inputs "sparse", "dense", "x"). Before
timing, each model's output is checked against float64: the sparse model against its
masked-dense twin (models/masked.py), the dense model against itself in float64, within
E2E_MULT rounding units or 4x the error of the same twin run densely in the case's dtype
(PyTorch's own error: deep models amplify rounding more than one op does). Then the call
is timed, and the row records throughput (tokens/s or images/s), on CUDA the peak memory a
warm call adds, and the bytes the model holds for its weights (bench/held.py: with what the
routes keep beside them). `shape` is (layers, width, length): (layers, dim, seq_len) for the
Transformer, (13, last channels, resolution) for MobileNet, (layers, hidden, intermediate) for
Llama.

Cases: the Sparse Transformer (inference and a training step: forward, backward, AdamW step),
MobileNetV1 with 90% sparse pointwise convolutions, Llama-shaped decode (prefill outside the
timed call, then `steps` tokens), and a short training run whose loss curves are compared.
Model weights are not rotated through L2: both models run as a user would run them. Inference,
decode and the training step are timed as CUDA graphs on both sides (as a server or a training
loop captures them; the eager time stays in the row as eager_ms). The step captures on the H200
(AdamW capturable): sparse 3.74 ms as a graph against 20.1 ms eager, dense 4.75 / 5.80 ms
(benchmarks/results/nvidia-h200/2026-11-30/at-15b48bc/train_step_graph.txt). A capture that
fails falls back to the eager time with a note (bench/harness.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from ..models.llama import LlamaConfig, LlamaStack
from ..models.masked import masked_dense
from ..models.mobilenet import channels, mobilenet_pair
from ..models.sparse_transformer import TransformerConfig, transformer_pair
from ..models.training import loss_curve, max_relative_difference, periodic_tokens
from ..prune import SparsityConfig, sparsify_
from .cases import OPS, Case, Expected, OpMath
from .harness import unit_roundoff
from .providers import Provider

# Allowed error, elementwise: E2E_MULT rounding units of the dtype times (|want| + rms(want)),
# or OWN_ERROR_MULT times the largest error of the float64 twin run in the case's dtype.
E2E_MULT = 64.0
OWN_ERROR_MULT = 4.0
CURVE_STEPS = 50


def _no_expected(case: Case, inputs: dict) -> Expected:
    raise AssertionError("e2e providers bring their own expected answer")


OPS.update(
    {
        op: OpMath(_no_expected, lambda case, inputs: (0, 0))
        for op in ("e2e_transformer", "e2e_transformer_train", "e2e_mobilenet", "e2e_llama")
        + ("e2e_train_curve",)
    }
)


def _close(value: torch.Tensor, own: torch.Tensor, dtype: torch.dtype) -> Expected:
    """value: the float64 answer; own: the same computation in `dtype` (dense kernels)."""
    value = value.detach().double()
    rms = value.square().mean().sqrt() if value.numel() else value.new_zeros(())
    own_error = (own.detach().double() - value).abs().max() if value.numel() else rms
    u = unit_roundoff(dtype)
    scale = rms + OWN_ERROR_MULT * own_error.nan_to_num(0.0) / (E2E_MULT * u)
    return Expected(value, scale.expand_as(value), 0, mult=E2E_MULT)


def _density(model: torch.nn.Module) -> float:
    layers = [m for m in model.modules() if hasattr(m, "dense_nbytes") and hasattr(m, "density")]
    total = sum(m.out_features * m.in_features for m in layers)
    return sum(m.values.numel() for m in layers) / total if total else 1.0


def _eps(case: Case) -> float:
    """cuDNN convolutions in fp32 use TF32 unless switched off."""
    tf32 = case.device.type == "cuda" and torch.backends.cudnn.allow_tf32
    return 2.0**-11 if tf32 and case.dtype == torch.float32 else 0.0


def _pair(setup: Callable, expected: Callable, case: Case, **kw) -> list[Provider]:
    """sk_model and dense: `setup(model, x)` and `expected(model, x, dtype)` (the masked-dense
    twin's answer computed in dtype) get the provider's model. `graph=True` times both sides as
    CUDA graphs (inference as a server runs it); the eager time stays in the row."""

    def answer(model, x) -> Expected:
        want = expected(model, x, torch.float64)
        return _close(want, expected(model, x, case.dtype), case.dtype)

    def make(key: str, name: str, ours: bool) -> Provider:
        return Provider(
            name,
            lambda c, inputs: setup(inputs[key], inputs["x"]),
            expected=lambda c, inputs: answer(inputs[key], inputs["x"]),
            ours=ours,
            holds=lambda inputs: inputs[key],
            eps=_eps(case),
            **kw,
        )

    return [make("sparse", "sk_model", True), make("dense", "dense", False)]


def _reference(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The twin in dtype: masked-dense for a sparse model, the same model for a dense one."""
    return masked_dense(model, dtype).eval()


# ============================================================================ Sparse Transformer
def transformer_case(
    cfg: TransformerConfig, batch: int, weights: str, dtype, device, *, train: bool = False
) -> Case:
    def build(seed: int) -> dict:
        sparse, dense = transformer_pair(cfg, weights, seed=seed, dtype=dtype, device=device)
        g = torch.Generator(device=device).manual_seed(seed)
        length = cfg.seq_len + (1 if train else 0)  # the loss predicts token t+1 from t
        x = torch.randint(0, cfg.vocab, (batch, length), generator=g, device=device)
        return {"sparse": sparse, "dense": dense, "x": x, "density": _density(sparse)}

    pattern = f"{SparsityConfig.coerce(weights).label} + local/strided {cfg.window}/{cfg.stride}"
    op = "e2e_transformer_train" if train else "e2e_transformer"
    shape = (cfg.layers, cfg.dim, cfg.seq_len)
    return Case(op, "csr", pattern, shape, math.nan, dtype, device, build, batch=batch,
                items=batch * cfg.seq_len, unit="tokens/s")  # fmt: skip


def _infer(model, x):
    model.eval()
    return lambda: model(x)


def _train_step(model, x):
    model = copy.deepcopy(model)  # training changes weights: the inputs keep the initial ones
    # capturable: the step count stays on the GPU, so the whole step can be a CUDA graph
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=x.is_cuda)

    def step():
        with torch.enable_grad():
            loss = model.loss(x)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return loss.detach()

    return step


def _transformer_providers(case: Case) -> list[Provider]:
    if case.op == "e2e_transformer_train":  # checks the first step's loss
        return _pair(_train_step, lambda m, x, dt: _reference(m, dt).loss(x), case, graph=True)
    return _pair(_infer, lambda m, x, dt: _reference(m, dt)(x), case, graph=True)


# ============================================================================ MobileNetV1
def mobilenet_case(width: float, batch: int, resolution: int, dtype, device) -> Case:
    def build(seed: int) -> dict:
        sparse, dense = mobilenet_pair(
            width, 0.9, resolution=resolution, seed=seed, dtype=dtype, device=device
        )
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(batch, 3, resolution, resolution, generator=g, device=device)
        return {"sparse": sparse, "dense": dense, "x": x.to(dtype), "density": _density(sparse)}

    shape = (13, channels(1024, width), resolution)
    return Case("e2e_mobilenet", "csr", f"90% pointwise, width {width}", shape, math.nan,
                dtype, device, build, batch=batch, items=batch, unit="images/s")  # fmt: skip


# ============================================================================ Llama decode
def llama_case(
    cfg: LlamaConfig, batch: int, weights: str, dtype, device, *, prompt: int, steps: int
) -> Case:
    config = SparsityConfig.coerce(weights)

    def build(seed: int) -> dict:
        torch.manual_seed(seed)
        dense = LlamaStack(cfg).to(device=device, dtype=dtype).eval()
        sparse = copy.deepcopy(dense)
        sparsify_(sparse, config)
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(batch, prompt, cfg.hidden, generator=g, device=device).to(dtype)
        return {"sparse": sparse, "dense": dense, "x": x, "density": _density(sparse)}

    shape = (cfg.layers, cfg.hidden, cfg.intermediate)
    return Case("e2e_llama", config.format, config.label, shape, math.nan, dtype, device,
                build, batch=batch, items=batch * steps, unit="tokens/s")  # fmt: skip


def _decode(steps: int):
    def setup(model, x):
        model.allocate_cache(x.shape[0], x.shape[1] + steps)
        with torch.no_grad():
            first = model(x, 0)[:, -1:]  # prefill, outside the timed call
        return lambda: model.decode(first, x.shape[1], steps)

    return setup


def _generate(steps: int):
    def expected(model, x, dtype):
        ref = _reference(model, dtype)
        ref.allocate_cache(x.shape[0], x.shape[1] + steps)
        return ref.generate(x.to(dtype), steps)

    return expected


# ============================================================================ training curve
def train_curve_case(cfg: TransformerConfig, batch: int, weights: str, dtype, device) -> Case:
    """CURVE_STEPS Adam steps of the sparse model and of its masked-dense twin (the `dense`
    provider here) from one initialisation, on the periodic-token task."""

    def build(seed: int) -> dict:
        sparse, _ = transformer_pair(cfg, weights, seed=seed, dtype=dtype, device=device)
        data = [
            periodic_tokens(batch, cfg.seq_len + 1, cfg.vocab, cfg.stride, seed=seed + i,
                            device=device)
            for i in range(4)
        ]  # fmt: skip
        twin = masked_dense(sparse)
        return {"sparse": sparse, "dense": twin, "x": data, "density": _density(sparse)}

    pattern = f"{SparsityConfig.coerce(weights).label}, {CURVE_STEPS} steps"
    shape = (cfg.layers, cfg.dim, cfg.seq_len)
    return Case("e2e_train_curve", "csr", pattern, shape, math.nan, dtype, device, build,
                batch=batch, items=CURVE_STEPS * batch * cfg.seq_len, unit="tokens/s")  # fmt: skip


def _curve_setup(model, data):
    return lambda: loss_curve(copy.deepcopy(model), data, CURVE_STEPS)


def _curve_expected(model, data, dtype):
    return loss_curve(masked_dense(model, dtype), data, CURVE_STEPS)


def _curve_record(out) -> dict:
    return {"loss_curve": [float(v) for v in out]}


def loss_curves(rows) -> dict:
    """case -> {provider: curve, ..., "max_rel_diff": sk_model's curve vs the masked-dense one}."""
    found: dict[str, dict] = {}
    for r in rows:
        if r.op == "e2e_train_curve" and "loss_curve" in r.extra:
            found.setdefault(r.case, {})[r.provider] = r.extra["loss_curve"]
    for curves in found.values():
        if "sk_model" in curves and "dense" in curves:
            a, b = (torch.tensor(curves[p]) for p in ("sk_model", "dense"))
            curves["max_rel_diff"] = max_relative_difference(a, b)
    return found


# ============================================================================ providers
def e2e_providers(case: Case) -> list[Provider]:
    if case.op in ("e2e_transformer", "e2e_transformer_train"):
        return _transformer_providers(case)
    if case.op == "e2e_mobilenet":
        return _pair(_infer, lambda m, x, dt: _reference(m, dt)(x.to(dt)), case, graph=True)
    if case.op == "e2e_llama":
        steps = case.items // case.batch
        return _pair(_decode(steps), _generate(steps), case, graph=True)
    if case.op == "e2e_train_curve":
        return _pair(_curve_setup, _curve_expected, case, record=_curve_record)
    raise ValueError(f"unknown e2e op {case.op!r}")
