"""Programmatic dependent launch on the one-token routes (kernels/_pdl.py): off unless asked for
and on Hopper; on the H200 (gpu) a chain of layers each reading the last one's output gives the
same bits with it as without, eagerly and as a CUDA graph."""

import pytest
import torch

import sparsekernels as sk
from sparsekernels.kernels import _pdl
from sparsekernels.ops import _launch_plans


def test_launch_options_checked():
    assert _pdl.launch_options(0) == {}
    assert _pdl.launch_options(2) == {"launch_pdl": True}
    with pytest.raises(ValueError, match="pdl must be 0, 1 or 2"):
        _pdl.launch_options(3)


def test_off_on_the_cpu_and_unless_asked(monkeypatch):
    monkeypatch.setenv("SPARSEKERNELS_PDL", "2")
    assert _pdl.decode_pdl(torch.device("cpu")) == 0
    monkeypatch.delenv("SPARSEKERNELS_PDL")
    assert _pdl.decode_pdl(torch.device("cpu")) == 0
    monkeypatch.setenv("SPARSEKERNELS_PDL", "yes")
    with pytest.raises(ValueError, match="SPARSEKERNELS_PDL must be 0, 1 or 2"):
        _pdl.decode_pdl(torch.device("cpu"))


def _layers(kind: str, count: int, size: int, sparsity: float, gen: torch.Generator) -> list:
    layers = []
    for _ in range(count):
        w = torch.randn(size, size, generator=gen).to("cuda", torch.bfloat16)
        if kind == "csr":
            mask = sk.prune.magnitude_mask(w.float(), sparsity)
            scale = ((1 - sparsity) * size) ** -0.5
            layers.append(sk.CSRMatrix.from_dense(w * mask * scale, mask=mask))
        else:
            n, m = (int(v) for v in kind[2:].split(":"))
            mask = sk.prune.nm_mask(w.float(), n, m)
            scale = (size * n / m) ** -0.5
            layers.append(sk.NMMatrix.from_dense(w * mask * scale, n, m, mask=mask))
    return layers


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind, rows, sparsity",
    [("csr", 4096, 0.9), ("csr", 12288, 0.95), ("nm1:8", 16384, 0), ("nm2:8", 4096, 0)],
)
@pytest.mark.parametrize("level", [1, 2])
def test_dependent_chain_same_bits(kind, rows, sparsity, level, gen, monkeypatch):
    """Six square layers (the one-token CSR kernel at 4096 rows, the stream walk at 12288 rows
    of 614 entries, 1:8 at 16384 (the TMA ring kernel) and 2:8 at 4096 (the select or mma.sp
    kernel)), each on the last's output, then the same chain captured and replayed as a CUDA
    graph three times: bitwise what the chain gives with PDL off."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs Hopper")
    layers = _layers(kind, 6, rows, sparsity, gen)
    x = torch.randn(1, rows, generator=gen).to("cuda", torch.bfloat16)

    def chain():
        y = x
        for W in layers:
            y = sk.linear(y, W)
        return y

    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # a plan keeps its first launch
    monkeypatch.setenv("SPARSEKERNELS_PDL", "0")
    want = chain()
    monkeypatch.setenv("SPARSEKERNELS_PDL", str(level))
    assert _pdl.decode_pdl(x.device) == level
    assert torch.equal(chain(), want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, want)
