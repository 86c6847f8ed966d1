"""File io: DLMC .smtx patterns and safetensors files of CSRMatrix / NMMatrix."""

from __future__ import annotations

import csv
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from sparsekernels import (
    CSRMatrix,
    NMMatrix,
    load_safetensors,
    load_smtx,
    save_safetensors,
    save_smtx,
)
from sparsekernels.prune import nm_mask

DLMC = Path(__file__).parents[2] / "shared" / "data" / "dlmc"
ARCHIVE = DLMC / "transformer_magnitude_pruning.tar.xz"
# Small members near the front of the archive (a streaming read stops once it has them).
MEMBERS = [
    "0.98/body_decoder_layer_1_encdec_attention_multihead_attention_output_transform_fully_connected.smtx",
    "0.98/body_encoder_layer_2_ffn_conv1_fully_connected.smtx",
    "0.98/body_encoder_layer_2_self_attention_multihead_attention_q_fully_connected.smtx",
]


@pytest.fixture(scope="session")
def dlmc_files(tmp_path_factory) -> list[Path]:
    """The MEMBERS of the DLMC Transformer archive, extracted once into a temporary folder."""
    if not ARCHIVE.is_file():
        pytest.skip(f"DLMC archive not found at {ARCHIVE} (expected ../shared beside the repo)")
    out = tmp_path_factory.mktemp("dlmc")
    wanted = {name: out / Path(name).name for name in MEMBERS}
    with tarfile.open(ARCHIVE, "r|xz") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if name in wanted:
                wanted[name].write_bytes(tar.extractfile(member).read())
                if all(p.exists() for p in wanted.values()):
                    break
    missing = [name for name, p in wanted.items() if not p.exists()]
    assert not missing, f"{ARCHIVE} lacks {missing}"
    return list(wanted.values())


def dlmc_stats(path: Path) -> dict[str, float] | None:
    """The row of dlmc.csv describing this matrix (shape, nnz, nnz-per-row mean and std)."""
    table = DLMC / "dlmc.csv"
    if not table.is_file():
        return None
    key = f"transformer/magnitude_pruning/0.98/{path.stem}"
    with table.open() as f:
        for row in csv.DictReader(f):
            if row["name"] == key:
                return {k: float(row[k]) for k in ("nrows", "ncols", "nnz", "std_nnz_per_row")}
    return None


def parse(path: Path):
    """The test's own .smtx reader."""
    header, offsets, columns = path.read_text().split("\n")[:3]
    rows, cols, nnz = (int(v) for v in header.split(","))
    return (rows, cols, nnz), [int(v) for v in offsets.split()], [int(v) for v in columns.split()]


def random_csr(rows, cols, density, seed, dtype=torch.float64) -> CSRMatrix:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, cols, generator=g, dtype=torch.float64) + 0.0
    values = values + values.sign() * 0.1
    keep = torch.rand(rows, cols, generator=g) < density
    return CSRMatrix.from_dense((values * keep).to(dtype))


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, so NaN payloads and signed zeros compare exactly."""
    views = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(views[t.element_size()])


def assert_bitwise(a: torch.Tensor, b: torch.Tensor):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(bits(a), bits(b))


# --------------------------------------------------------------------------- .smtx: DLMC files
def test_load_dlmc(dlmc_files):
    for path in dlmc_files:
        (rows, cols, nnz), offsets, columns = parse(path)
        A = load_smtx(path)
        assert A.shape == (rows, cols) and A.nnz == nnz
        assert A.row_offsets.tolist() == offsets and A.column_indices.tolist() == columns
        assert A.row_offsets.dtype == torch.int32 and A.column_indices.dtype == torch.int16
        assert A.dtype == torch.float32 and A.device == torch.device("cpu")
        assert bool((A.values != 0).all()) and bool(A.values.isfinite().all())
        assert abs(float(A.values.double().mean())) < 0.1 and 0.9 < float(A.values.std()) < 1.1
        dense = A.to_dense()
        assert int((dense != 0).sum()) == nnz
        stats = dlmc_stats(path)
        if stats is not None:  # against the collection's own statistics
            assert (rows, cols, nnz) == (stats["nrows"], stats["ncols"], stats["nnz"])
            lengths = A.row_offsets.diff().double()
            assert float(lengths.std(correction=0)) == pytest.approx(stats["std_nnz_per_row"])


def test_dlmc_values_seeded_and_given(dlmc_files):
    path = dlmc_files[0]
    a, b, c = load_smtx(path), load_smtx(path, seed=0), load_smtx(path, seed=1)
    assert torch.equal(a.values, b.values)
    assert not torch.equal(a.values, c.values) and bool((c.values != 0).all())
    given = torch.randn(a.nnz, dtype=torch.float64)
    d = load_smtx(path, given, dtype=torch.float64)
    assert torch.equal(d.values, given) and torch.equal(d.row_offsets, a.row_offsets)
    half = load_smtx(path, dtype=torch.bfloat16, seed=1)
    assert half.dtype == torch.bfloat16 and torch.equal(half.values, c.values.bfloat16())
    with pytest.raises(ValueError, match=rf"values must have shape \({a.nnz},\).*{path.name}"):
        load_smtx(path, torch.randn(a.nnz - 1))
    with pytest.raises(TypeError, match="dtype must be float16"):  # (the caller's: no path)
        load_smtx(path, dtype=torch.int32)
    with pytest.raises(TypeError, match="values must be float16"):
        load_smtx(path, torch.ones(a.nnz, dtype=torch.int64))


def test_dlmc_save_writes_the_same_matrix(dlmc_files, tmp_path):
    for path in dlmc_files:
        out = tmp_path / path.name
        save_smtx(load_smtx(path), out)
        assert parse(out) == parse(path)
        # The same text but for DLMC's trailing spaces.
        assert out.read_text().split("\n") == [
            line.rstrip() for line in path.read_text().split("\n")
        ]


def test_truncated_dlmc_file(dlmc_files, tmp_path):
    text = dlmc_files[0].read_text()
    first_break, second_break = text.index("\n"), text.index("\n", text.index("\n") + 1)
    cuts = {
        "header only": first_break + 1,
        "mid header": 5,
        "mid row offsets": first_break + 1 + (second_break - first_break) // 2,
        "no column line": second_break + 1,
        "mid column line": second_break + 1 + (len(text) - second_break) // 2,
        "last column dropped": text.rstrip().rindex(" "),
        "last digit dropped": len(text.rstrip()) - 1,  # "... 479 505" -> "... 479 50": unsorted
    }
    for what, cut in cuts.items():
        path = tmp_path / f"{what.replace(' ', '_')}.smtx"
        path.write_text(text[:cut])
        with pytest.raises(ValueError, match=re.escape(path.name)):
            load_smtx(path)


@pytest.mark.parametrize(
    "text, words",
    [
        ("1, 3, -1\n0 -1\n\n", "must be >= 0"),
        ("2,,3,,,2\n0 1 2\n0 1\n", "header must be 'rows, cols, nnz'"),
        ("1, 3, 1\n0 1\n2\n7 7 7 7\n", "three lines; line 4 holds '7 7 7 7'"),
    ],
)
def test_malformed_smtx_text(text, words, tmp_path):
    path = tmp_path / "bad.smtx"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"bad.smtx.*{re.escape(words)}"):
        load_smtx(path)
    path.write_text(text.split("\n7")[0] + "\n\n")  # (trailing blank lines are fine)
    if "line 4" in words:
        assert load_smtx(path).nnz == 1


# --------------------------------------------------------------------------- .smtx: written here
@pytest.mark.parametrize("shape, density", [((30, 40), 0.2), ((1, 7), 1.0), ((5, 3), 0.0)])
def test_smtx_round_trip(tmp_path, shape, density):
    A = random_csr(*shape, density, seed=shape[0])
    path = tmp_path / "a.smtx"
    save_smtx(A, path)
    header = path.read_text().split("\n")[0]
    assert header == f"{shape[0]}, {shape[1]}, {A.nnz}"
    B = load_smtx(path, A.values, dtype=torch.float64)
    assert torch.equal(B.row_offsets, A.row_offsets)
    assert torch.equal(B.column_indices, A.column_indices)
    assert torch.equal(B.to_dense(), A.to_dense())
    C = load_smtx(str(path), seed=3)  # str paths work too; values drawn fresh, never zero
    assert torch.equal(C.row_offsets, A.row_offsets) and bool((C.values != 0).all())


def test_save_smtx_rejects_other_types(tmp_path):
    W = NMMatrix.from_dense(torch.zeros(2, 4), n=2, m=4)
    with pytest.raises(TypeError, match="matrix must be a CSRMatrix"):
        save_smtx(W, tmp_path / "w.smtx")


BAD_SMTX = [
    # (file text, message)
    ("", r"needs a header and row offsets, found 0 line"),
    ("3, 4, 2\n", r"needs a header and row offsets, found 1 line"),
    ("3, 4\n0 1 1 2\n0 3\n", r"header must be 'rows, cols, nnz'"),
    ("3, 4, 2, 7\n0 1 1 2\n0 3\n", r"header must be 'rows, cols, nnz'"),
    ("three, 4, 2\n0 1 1 2\n0 3\n", r"header \(rows, cols, nnz\) must be integers"),
    ("3.0, 4, 2\n0 1 1 2\n0 3\n", r"header .* must be integers"),
    ("3, 4, 2\n0 1 1.5 2\n0 3\n", r"row offsets must be integers"),
    ("3, 4, 2\n0 1 1 2\n0 x3\n", r"column indices must be integers"),
    ("3, 4, 2\n0 1 1 2\n0 3e0\n", r"column indices must be integers"),
    ("3, 4, 2\n0 1 2\n0 3\n", r"expected 4 row offsets, found 3"),
    ("3, 4, 2\n0 1 1 2 2\n0 3\n", r"expected 4 row offsets, found 5"),
    ("3, 4, 2\n0 1 1 2\n0\n", r"expected 2 column indices, found 1"),
    ("3, 4, 2\n0 1 1 2\n", r"expected 2 column indices, found 0"),
    ("3, 4, 2\n0 1 1 2\n0 3 1\n", r"expected 2 column indices, found 3"),
    ("3, 4, 2\n0 1 1 2\n0 4\n", r"not a valid sparse matrix: column_indices must lie in"),
    ("3, 4, 2\n0 2 1 2\n0 3\n", r"not a valid sparse matrix: row_offsets must be non-decreasing"),
    ("3, 4, 2\n1 1 1 2\n0 3\n", r"not a valid sparse matrix: row_offsets must start at 0"),
    ("3, 4, 2\n0 2 2 2\n3 1\n", r"not a valid sparse matrix: column_indices must be strictly"),
    ("-3, 4, 0\n\n\n", r"header's rows, cols and nnz must be >= 0"),
    ("-1, 4, 0\n\n\n", r"header's rows, cols and nnz must be >= 0"),
    ("3, 4, 2\n0 1 1 99999999999999999999\n0 3\n", r"row offsets must be integers below 2\*\*63"),
]


@pytest.mark.parametrize("text, message", BAD_SMTX)
def test_bad_smtx(tmp_path, text, message):
    path = tmp_path / "bad.smtx"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: .*{message}"):
        load_smtx(path)


def test_smtx_keeps_the_given_values_dtype(tmp_path):
    path = tmp_path / "m.smtx"
    path.write_text("2, 3, 2\n0 1 2\n0 2\n")
    values = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
    assert torch.equal(load_smtx(path, values).values, values)
    assert load_smtx(path, values, dtype=torch.float16).values.dtype == torch.float16
    assert load_smtx(path).values.dtype == torch.float32


def test_smtx_values_must_be_a_tensor(tmp_path):
    path = tmp_path / "m.smtx"
    path.write_text("2, 3, 2\n0 1 2\n0 2\n")
    with pytest.raises(TypeError, match="values must be a torch.Tensor, got list"):
        load_smtx(path, values=[1.0, 2.0])


def test_binary_smtx(tmp_path):
    path = tmp_path / "binary.smtx"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: "):
        load_smtx(path)


# --------------------------------------------------------------------------- safetensors
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [None, 3])
def test_safetensors_csr_round_trip(tmp_path, dtype, batch):
    A = random_csr(17, 23, 0.3, seed=5, dtype=dtype)
    if batch is not None:
        A = A.with_values(torch.randn(batch, A.nnz, dtype=torch.float64).to(dtype))
    values = A.values.clone()
    values.view(-1)[0] = float("nan")  # a NaN and a signed zero survive bit for bit
    values.view(-1)[1] = -0.0
    A = A.with_values(values)
    path = tmp_path / "a.safetensors"
    save_safetensors(A, path)
    B = load_safetensors(path)
    assert isinstance(B, CSRMatrix) and B.shape == A.shape and B.batch == batch
    assert_bitwise(B.row_offsets, A.row_offsets)
    assert_bitwise(B.column_indices, A.column_indices)
    assert_bitwise(B.values, A.values)


def test_safetensors_csr_special_shapes(tmp_path):
    empty = CSRMatrix(
        torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0), (3, 5)
    )
    wide = CSRMatrix(
        torch.tensor([0, 1, 2]),
        torch.tensor([3, 2**31 - 1]),
        torch.randn(2, dtype=torch.float64),
        (2, 2**31),
    )
    grad = random_csr(6, 6, 0.5, seed=6)
    grad = grad.with_values(grad.values.clone().requires_grad_(True))
    for i, A in enumerate((empty, wide, grad)):
        path = tmp_path / f"{i}.safetensors"
        save_safetensors(A, str(path))
        B = load_safetensors(str(path))
        assert B.shape == A.shape
        assert_bitwise(B.row_offsets, A.row_offsets)
        assert_bitwise(B.column_indices, A.column_indices)
        assert_bitwise(B.values, A.values.detach())
        assert not B.values.requires_grad


@pytest.mark.parametrize(
    "n, m, vector, block",
    [(2, 4, 1, 1), (2, 8, 1, 1), (1, 32, 4, 1), (4, 16, 4, 4), (16, 32, 1, 8)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_safetensors_nm_round_trip(tmp_path, n, m, vector, block, dtype):
    w = torch.randn(10, 2 * m, generator=torch.Generator().manual_seed(m), dtype=torch.float64)
    mask = nm_mask(w, n, m, vector, block)
    W = NMMatrix.from_dense((w * mask).to(dtype), n, m, vector, block, mask=mask)
    path = tmp_path / "w.safetensors"
    save_safetensors(W, path)
    V = load_safetensors(path)
    assert isinstance(V, NMMatrix)
    assert (V.shape, V.n, V.m, V.vector, V.block) == (W.shape, n, m, vector, block)
    assert_bitwise(V.values, W.values)
    assert_bitwise(V.indices, W.indices)
    assert torch.equal(V.to_dense(), W.to_dense())


def test_save_safetensors_rejects_other_types(tmp_path):
    with pytest.raises(TypeError, match="matrix must be a CSRMatrix or NMMatrix"):
        save_safetensors(torch.randn(3, 3), tmp_path / "x.safetensors")


@pytest.fixture
def saved(tmp_path) -> Path:
    path = tmp_path / "good.safetensors"
    save_safetensors(random_csr(40, 50, 0.2, seed=7), path)
    return path


def test_safetensors_load_onto_the_meta_device(saved, tmp_path):
    """Validated where read, then moved: straight onto meta it was called corrupted."""
    matrix = load_safetensors(saved, device="meta")
    assert matrix.device.type == "meta" and matrix.shape == (40, 50)
    nm = NMMatrix.from_dense(torch.tensor([[1.0, 0, 2, 0]]), n=2, m=4)
    save_safetensors(nm, tmp_path / "nm.safetensors")
    assert load_safetensors(tmp_path / "nm.safetensors", device="meta").device.type == "meta"


def test_truncated_safetensors(saved, tmp_path):
    data = saved.read_bytes()
    for cut in (0, 4, 8, 20, len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut{cut}.safetensors"
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: not a readable"):
            load_safetensors(path)


def test_corrupted_safetensors(saved, tmp_path):
    data = bytearray(saved.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(bytes(data[:8]) + b"\xff" * header_len + bytes(data[8 + header_len :]))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(garbage))}: not a readable"):
        load_safetensors(garbage)
    noise = tmp_path / "noise.safetensors"
    noise.write_bytes(np.random.default_rng(8).bytes(len(data)))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(noise))}: "):
        load_safetensors(noise)


def test_safetensors_with_bad_contents(tmp_path):
    A = random_csr(8, 9, 0.4, seed=9)
    tensors = {"row_offsets": A.row_offsets, "column_indices": A.column_indices, "values": A.values}
    cases = {
        "no_metadata": (tensors, None, r"no sparsekernels metadata"),
        "other_metadata": (tensors, {"format": "pt"}, r"no sparsekernels metadata"),
        "bad_json": (tensors, {"sparsekernels": "{shape"}, r"not a readable"),
        "wrong_format": (tensors, {"sparsekernels": '{"format": "coo"}'}, r"no sparsekernels"),
        "missing_tensor": (
            {"row_offsets": A.row_offsets, "values": A.values},
            {"sparsekernels": '{"format": "csr", "shape": [8, 9]}'},
            r"corrupted sparse matrix",
        ),
        "wrong_shape": (
            tensors,
            {"sparsekernels": '{"format": "csr", "shape": [9, 9]}'},
            r"corrupted sparse matrix: row_offsets must have rows \+ 1",
        ),
        "column_out_of_range": (
            {**tensors, "column_indices": A.column_indices + 9},
            {"sparsekernels": '{"format": "csr", "shape": [8, 9]}'},
            r"corrupted sparse matrix: column_indices must lie in",
        ),
        "nm_without_n": (
            tensors,
            {"sparsekernels": '{"format": "nm", "shape": [8, 9]}'},
            r"corrupted sparse matrix",
        ),
        "nm_bad_indices": (
            {
                "values": torch.randn(2, 4),
                "indices": torch.tensor([[0, 1, 2, 9], [1, 2, 3, 4]], dtype=torch.uint8),
            },
            {
                "sparsekernels": '{"format": "nm", "shape": [2, 16], "n": 2, "m": 8, "vector": 1,'
                ' "block": 1}'
            },
            r"corrupted sparse matrix: indices must be block offsets",
        ),
    }
    for name, (contents, metadata, message) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        save_file({k: v.contiguous() for k, v in contents.items()}, str(path), metadata=metadata)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: .*{message}"):
            load_safetensors(path)
