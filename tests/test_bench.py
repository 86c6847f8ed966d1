"""The benchmark harness end to end on CPU: quick suite, files, a wrong provider, ratios."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
import tarfile

import pytest
import torch
from rich.console import Console

from sparsekernels.bench import cli, dlmc, harness, info, output, providers, runner, suites
from sparsekernels.bench.cases import Expected, sddmm_case, weight_case
from sparsekernels.bench.providers import Provider

CPU = torch.device("cpu")
ROW_FIELDS = {
    "op",
    "format",
    "pattern",
    "shape",
    "density",
    "dtype",
    "provider",
    "time_ms",
    "tflops",
    "gbps",
    "status",
    "flops",
    "bytes",
    "method",
    "max_err",
}


def _off_by_one_row(case, x):
    """A deliberately wrong SpMM: the dense product with its first row zeroed."""
    W, B = x["W"], x["B"]

    def call():
        out = W @ B
        out[0] = 0
        return out

    return call


def _raises(case, x):
    raise RuntimeError("this provider always fails")


def _spmm_only(case):
    return [] if case.op == "spmm" else ["spmm only"]


def _smallest_zeroed(case, x):
    """The exact product rounded once, but its smallest element zeroed: within check's
    tolerance in bf16 (|want| far below the output's scale), past the strict bound."""
    W, B = x["W"], x["B"]

    def call():
        out = W.double() @ B.double()
        out.view(-1)[out.abs().argmin()] = 0
        return out.to(B.dtype)

    return call


EXTRA = (
    Provider("broken", _off_by_one_row, _spmm_only),
    Provider("crashing", _raises, _spmm_only),
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    config = runner.RunConfig(["quick"], CPU, out=out, argv=["--quick"], extra=EXTRA)
    return runner.run(config, console=Console(file=io.StringIO()))


def test_quick_suite_writes_every_file(quick_run):
    names = {p.name for p in quick_run.files}
    assert {"results.jsonl", "summary.md"} <= names
    assert any(n.startswith("speedup-spmm") and n.endswith(".png") for n in names)
    assert any(n.startswith("roofline-") for n in names)
    for path in quick_run.files:
        assert path.exists() and path.stat().st_size > 0
    meta, rows = output.read_jsonl(quick_run.out_dir / "results.jsonl")
    for key in ("device", "torch", "triton", "cuda", "date", "command", "hostname", "ceilings"):
        assert key in meta
    assert meta["ceilings"]["copy_gbps"] > 0 and meta["ceilings"]["matmul_tflops"]["fp32"] > 0
    assert len(rows) == len(quick_run.rows)
    for row in rows:
        assert row.keys() >= ROW_FIELDS
    assert {r["op"] for r in rows} == {"spmm", "linear", "sddmm", "softmax", "attention"}


def test_every_op_is_timed_against_a_peer(quick_run):
    for op in ("spmm", "linear", "sddmm", "softmax", "attention"):
        ok = [r for r in quick_run.rows if r.op == op and r.status == "ok"]
        assert any(r.ours for r in ok), op
        assert any(not r.ours for r in ok), op
        for r in ok:
            assert r.time_ms > 0 and r.tflops > 0 and r.gbps > 0 and r.max_err <= 1


def test_the_automatic_route_is_marked_and_summarised(quick_run):
    """Each case's backend that automatic dispatch picks (and only it) carries the note, and the
    summary reports it against the peers."""
    from sparsekernels.bench.cases import AUTOMATIC_ROUTE
    from sparsekernels.bench.output import _by_case

    for case, rows in _by_case(quick_run.rows).items():
        marked = [r.provider for r in rows if AUTOMATIC_ROUTE in r.note]
        assert len(marked) == 1 and marked[0].startswith("sk_"), (case, marked)
    summary = (quick_run.out_dir / "summary.md").read_text()
    assert "The automatic route (backend=None) against each peer: " in summary


@pytest.mark.parametrize(
    ("density", "n", "route"),
    [(0.02, 256, "sk_triton"), (0.2, 256, "sk_dense"), (0.3, 16, "sk_scatter")],
)
def test_the_marked_route_sees_what_the_op_sees(density, n, route):
    """The harness asks dispatch with the facts the op passes: a bf16 CSR product at N = 256
    stays on the CSR kernel when small (512 x 512 at 2%: its stored entries count) and densifies
    at 20%; at 16 tokens the CSRMatrix's prepared copy takes the scatter kernel. No GPU is
    needed: dispatch only reads the problem's device type."""
    from sparsekernels.bench import providers
    from sparsekernels.bench.cases import AUTOMATIC_ROUTE, Case

    case = Case(
        "spmm", "csr", "random", (512, 512, n), density, torch.bfloat16,
        torch.device("cuda"), build=lambda seed: {},
    )  # fmt: skip
    marked = [e.provider.name for e in providers.ours(case) if e.provider.note == AUTOMATIC_ROUTE]
    assert marked == [route]


def test_summary_rebuilds_from_results_file(quick_run, tmp_path):
    """benchmarks/summarize.py's path: results.jsonl read back into rows (Row.from_dict) gives
    the summary the run wrote, ratios and the automatic route included."""
    meta, records = output.read_jsonl(quick_run.out_dir / "results.jsonl")
    rows = [harness.Row.from_dict(r) for r in records]
    assert [r.to_dict() for r in rows] == records
    assert output.summary_markdown(meta, rows) == (quick_run.out_dir / "summary.md").read_text()


def test_wrong_provider_is_reported_not_timed(quick_run):
    broken = [r for r in quick_run.rows if r.provider == "broken"]
    assert broken and {r.status for r in broken} == {"wrong", "unsupported"}
    for r in broken:
        if r.status == "wrong":
            assert r.time_ms is None and r.max_err > 1 and "tolerance" in r.error
    crashing = [r for r in quick_run.rows if r.provider == "crashing" and r.op == "spmm"]
    assert crashing and all(r.status == "error" and "always fails" in r.error for r in crashing)
    # a wrong provider appears in no ratio
    assert all("broken" not in r.speedup_vs for r in quick_run.rows)


def test_strict_providers_are_gated_by_the_strict_bound(tmp_path):
    """The same output passes as a peer (recorded past the strict bound) and is wrong from a
    provider marked strict; our Triton kernels for spmm and linear are marked so."""
    zeroed = (
        Provider("zeroed_strict", _smallest_zeroed, _spmm_only, strict=True),
        Provider("zeroed_loose", _smallest_zeroed, _spmm_only),
    )
    config = runner.RunConfig(
        ["quick"],
        CPU,
        dtypes=(torch.bfloat16,),
        out=tmp_path,
        providers={"zeroed_strict", "zeroed_loose"},
        plots=False,
        extra=zeroed,
    )
    rows = runner.run(config, console=Console(file=io.StringIO())).rows
    by_case = {(r.provider, tuple(r.shape), r.pattern): r for r in rows}
    gated = 0
    for (name, *case), loose in by_case.items():
        if name != "zeroed_loose" or loose.status != "ok" or not loose.strict_err > 1:
            continue
        strict = by_case[("zeroed_strict", *case)]
        assert strict.status == "wrong" and "past the strict bound" in strict.error
        assert strict.time_ms is None
        gated += 1
    assert gated  # (bf16: the zeroed element's |want| is far below the output's scale)
    case = weight_case("spmm", 64, 64, 16, torch.bfloat16, CPU, sparsity=0.9)
    strict = {e.provider.name for e in providers.ours(case) if e.provider.strict}
    assert strict == {"sk_triton", "sk_scatter"}
    sddmm = sddmm_case(64, 16, 64, 0.1, torch.bfloat16, CPU)  # (not measured against it)
    assert not any(e.provider.strict for e in providers.ours(sddmm))


def test_ratios_are_time_ratios_within_a_case(quick_run):
    by_case = output._by_case(quick_run.rows)
    checked = 0
    for rows in by_case.values():
        timed = {r.provider: r for r in rows if r.status == "ok"}
        for r in timed.values():
            assert set(r.speedup_vs) == set(timed) - {r.provider}
            for peer, ratio in r.speedup_vs.items():
                assert math.isclose(ratio, timed[peer].time_ms / r.time_ms)
                checked += 1
    assert checked
    line = json.loads((quick_run.out_dir / "results.jsonl").read_text().splitlines()[2])
    assert any(k.startswith("speedup_vs_") for k in line) or line["status"] != "ok"
    summary = (quick_run.out_dir / "summary.md").read_text()
    assert "## spmm fp32" in summary and "Wrong or failed" in summary and "broken" in summary
    assert "## Strict bound" in summary
    ok = [r for r in quick_run.rows if r.status == "ok" and r.op == "spmm"]
    assert ok and all(r.strict_err is not None and r.strict_err <= 1 for r in ok)


def test_cases_of_one_pattern_at_two_densities_stay_apart():
    """ "random" at 10% and at 50% are two cases: neither their peers nor a previous run's
    times may be paired across densities."""
    row = {"op": "spmm", "format": "csr", "pattern": "random", "shape": [8, 8, 8], "dtype": "bf16"}
    keys = {harness.case_key({**row, "density": d}) for d in (0.1, 0.5, None)}
    assert len(keys) == 3
    assert harness.case_key({**row, "density": 0.1}) == harness.case_key({**row, "density": 0.1})


def test_check_catches_one_bad_row():
    value = torch.randn(64, 8, dtype=torch.float64)
    want = Expected(value, value.abs() * 3, terms=64)
    good = value.to(torch.bfloat16)
    assert harness.check(good, want, torch.bfloat16)[0] <= 1
    bad = good.clone()
    bad[5] *= 1.1
    assert harness.check(bad, want, torch.bfloat16)[0] > 1
    nan = good.clone()
    nan[0, 0] = float("nan")
    assert harness.check(nan, want, torch.bfloat16)[0] == math.inf
    assert harness.check(good[:3], want, torch.bfloat16)[0] == math.inf


def test_strict_ratio_catches_a_zeroed_feature_at_one_token():
    """check's bound (4u (|want| + sum |w x|)) passes a zeroed bf16 output feature about half
    the time at one token; strict_ratio's (fp32 accumulation, then one rounding) does not."""
    g = torch.Generator().manual_seed(7)
    W = torch.randn(96, 4096, generator=g).to(torch.bfloat16)
    x = torch.randn(4096, 1, generator=g).to(torch.bfloat16)
    W64, x64 = W.double(), x.double()
    want = Expected(W64 @ x64, W64.abs() @ x64.abs(), terms=4096)
    good = (W.float() @ x.float()).to(torch.bfloat16)  # what an fp32-accumulating kernel returns
    assert harness.check(good, want, torch.bfloat16)[0] <= 1
    assert harness.strict_ratio(good, want, torch.bfloat16) <= 1
    loose = strict = 0
    for i in range(96):
        bad = good.clone()
        bad[i] = 0
        loose += harness.check(bad, want, torch.bfloat16)[0] > 1
        strict += harness.strict_ratio(bad, want, torch.bfloat16) > 1
    assert loose < 70 and strict >= 94
    nan = good.clone()
    nan[3] = float("nan")
    assert harness.strict_ratio(nan, want, torch.bfloat16) == math.inf
    assert harness.strict_ratio(good[:3], want, torch.bfloat16) is None
    assert harness.strict_ratio(good, Expected(want.value, want.scale, 1, floor=2.0**-20),
                                torch.bfloat16) is None  # fmt: skip


def test_triton_is_not_run_on_cpu_unless_named():
    case = weight_case("spmm", 64, 64, 8, torch.float32, CPU, sparsity=0.5)
    from sparsekernels.bench.providers import providers_for

    entries = {e.provider.name: e for e in providers_for(case)}
    assert entries["sk_triton"].status == "unsupported"
    assert entries["sk_reference"].status == "ready"
    assert entries["sk_scatter"].status == "unsupported"  # Gluon: CUDA only
    only = {e.provider.name for e in providers_for(case, {"sk", "dense"})}
    ours = {"sk_scatter", "sk_dense", "sk_triton", "sk_torch_sparse", "sk_reference"}
    assert only == ours | {"dense"}


def _smtx(rows, cols, entries):
    offsets, columns = [0], []
    for r in range(rows):
        row = [c for (i, c) in entries if i == r]
        columns += row
        offsets.append(len(columns))
    lines = [
        f"{rows}, {cols}, {len(columns)}",
        " ".join(map(str, offsets)),
        " ".join(map(str, columns)),
    ]
    return "\n".join(lines) + "\n"


def test_dlmc_archives_are_extracted_once_and_sampled(tmp_path):
    source = tmp_path / "src"
    (source / "build" / "0.5").mkdir(parents=True)
    (source / "build" / "0.5" / "layer_a.smtx").write_text(_smtx(4, 8, [(0, 1), (1, 2), (3, 7)]))
    (source / "build" / "0.5" / "layer_b.smtx").write_text(_smtx(8, 8, [(0, 0), (5, 5)]))
    with tarfile.open(source / "rn50_magnitude_pruning.tar.xz", "w:xz") as tar:
        tar.add(source / "build", arcname=".")
    (source / "rn50_batchsizes.txt").write_text("layer_a,16\nlayer_b,32\n")
    cache = tmp_path / "cache"
    matrices, sizes = dlmc.find(source, cache)
    assert sorted(m.name for m in matrices) == ["layer_a", "layer_b"]
    assert sizes == {"layer_a": 16, "layer_b": 32}
    m = matrices[0]
    assert (m.model, m.technique, m.sparsity) == ("rn50", "magnitude_pruning", 0.5)
    marker = cache / "rn50_magnitude_pruning" / ".extracted"
    stamp = marker.stat().st_mtime_ns
    dlmc.find(source, cache)
    assert marker.stat().st_mtime_ns == stamp  # not extracted twice
    assert len(dlmc.sample(matrices, 1)) == 1
    subset = tmp_path / "subset"
    chosen = dlmc.write_subset(subset, 1, source, cache)
    again, sizes_again = dlmc.find(subset, tmp_path / "unused")
    assert [m.label for m in again] == [m.label for m in chosen] and len(again) == 1
    assert sizes_again == sizes


def test_dlmc_suite_runs_from_a_folder(tmp_path, monkeypatch):
    folder = tmp_path / "dlmc" / "transformer" / "magnitude_pruning" / "0.7"
    folder.mkdir(parents=True)
    (folder / "ffn.smtx").write_text(_smtx(16, 32, [(i, (3 * i) % 32) for i in range(16)]))
    ctx = suites.Context(CPU, dlmc=tmp_path / "dlmc", limit=1)
    cases = suites.build(["dlmc"], ctx)
    assert [c.shape[2] for c in cases] == [16, 64] and cases[0].source.startswith("transformer/")
    timer = harness.Timer(CPU, warmup_ms=1, rep_ms=2)
    from sparsekernels.bench.providers import providers_for

    rows = harness.run_case(cases[0], providers_for(cases[0], {"sk_reference", "dense"}), timer)
    assert [r.status for r in rows] == ["ok", "ok"] and rows[0].density == pytest.approx(16 / 512)


def test_cli_errors_return_codes(tmp_path, capsys):
    assert cli.main(["--suite", "nope"]) == 2
    assert cli.main(["--dtype", "fp8"]) == 2
    assert cli.main(["--providers", "nobody"]) == 2
    assert cli.main(["--help"]) == 0
    capsys.readouterr()


def test_cli_main_runs_quick_on_cpu(tmp_path, capsys):
    argv = ["--quick", "--device", "cpu", "--providers", "sk_reference,dense", "--limit", "3"]
    assert cli.main([*argv, "--no-plots", "--out", str(tmp_path)]) == 0
    meta, rows = output.read_jsonl(tmp_path / "results.jsonl")
    assert meta["argv"][:2] == ["--quick", "--device"] and len(rows) == 5
    assert {r["provider"] for r in rows} == {"sk_reference", "dense"}
    assert all(r["status"] == "ok" for r in rows)
    capsys.readouterr()


def test_info_lists_backends_and_reasons():
    report = info()
    assert report["torch"] == torch.__version__
    cpu = report["backends"]["cpu"]
    assert cpu["spmm_csr"]["reference"] == "available"
    assert cpu["spmm_csr"]["triton"] != "available"  # says why not
    json.dumps(report, default=str)


def test_gpu_suites_build_without_device_work_and_gate_peers():
    """Suites only describe cases (no tensors), so a CUDA plan can be checked on a CPU."""
    ctx = suites.Context(torch.device("cuda"))
    from sparsekernels.bench.providers import providers_for

    names = ("quick", "llm", "llm_linear", "nm", "nmfew", "nmsparse", "sddmm", "softmax")
    for name in (*names, "attention"):
        assert suites.build([name], ctx), name
    llm = suites.build(["llm"], ctx)
    assert len(llm) == 3 * 7 * 6 and {c.shape[2] for c in llm} == {1, 4, 8, 16, 32, 64, 2048}
    large = suites.build(["llm_large"], ctx)
    assert len(large) == (5 + 3) * 6 and (28672, 8192, 8192) in {c.shape for c in large}
    two_four = next(c for c in llm if c.pattern == "2:4" and c.shape[2] == 16)
    status = {e.provider.name: e.status for e in providers_for(two_four)}
    assert status["torch24"] == "ready" and status["cusparse"] == "ready"
    assert status["sk_reference"] == "skipped" and status["torch_bsr32"] == "ready"
    dense_fp32 = next(c for c in suites.build(["sddmm"], ctx) if c.dtype == torch.float32)
    assert "dense_tf32" in {e.provider.name for e in providers_for(dense_fp32)}
    assert len(suites.build(["nm"], suites.Context(torch.device("cuda"), limit=5))) == 5
    nm_tokens = {c.shape[2] for c in suites.build(["nm"], ctx)}
    assert nm_tokens == {1, 8, 16, 2048}  # (issue 4's decode sizes: 1, 8 and 16 tokens)
    few = suites.build(["nmfew"], ctx)
    assert len(few) == 3 * 6 * (8 * 2 + 5) and {c.op for c in few} == {"linear"}
    assert {c.shape[2] for c in few} == {2, 4, 8, 12, 16, 24}  # (around the routes' edges)
    lin = suites.build(["llm_linear"], ctx)
    assert len(lin) == 3 * 4 * 5 and {c.op for c in lin} == {"linear"}
    nms = suites.build(["nmsparse"], ctx)
    assert len(nms) == 7 * 4 * 7 + 7 * 2 * 4  # bf16: 4 batches x 7 patterns; fp32: 2 x 4
    fp32_vw = {(c.pattern, c.shape) for c in nms if c.dtype == torch.float32}
    assert ("4:32,v=32", (20480, 5120, 4096)) in fp32_vw and (
        "8:32,v=32",
        (1024, 1024, 1),
    ) in fp32_vw
    assert {c.shape[2] for c in nms if c.dtype == torch.bfloat16} == {1, 256, 1024, 4096}


def test_a_case_whose_inputs_fail_gives_error_rows():
    case = weight_case("spmm", 8, 8, 4, torch.float32, CPU, sparsity=0.5)
    case.build = _raises_build
    from sparsekernels.bench.providers import providers_for

    rows = harness.run_case(case, providers_for(case), harness.Timer(CPU))
    assert rows and all(r.status == "error" and "building inputs" in r.error for r in rows)
    assert all(r.to_dict()["density"] == 0.5 for r in rows)


def _raises_build(seed):
    raise MemoryError("no room")


def test_compare_with_a_previous_run(quick_run, tmp_path):
    from sparsekernels.bench.compare import compare_markdown

    previous = quick_run.out_dir / "results.jsonl"
    assert quick_run.meta.get("commit") is None or isinstance(quick_run.meta["commit"], str)
    text = compare_markdown(previous, quick_run.rows, quick_run.meta["device"])
    first = next(r for r in quick_run.rows if r.ours and r.status == "ok")
    same_group = [
        r
        for r in quick_run.rows
        if r.ours
        and r.status == "ok"
        and (r.op, r.dtype, r.provider) == (first.op, first.dtype, first.provider)
    ]
    assert "## Against our previous version" in text
    # compared with itself, every case of ours is matched and runs at exactly 1.00x
    assert f"| {first.op} | {first.dtype} | {first.provider} | {len(same_group)} | 1.00x |" in text
    assert "had no match" not in text and "Drift: the peers" in text and "1.00x their" in text
    # a case the earlier run lacks is named, not dropped silently
    moved = dataclasses.replace(first, shape=(first.shape[0] + 1, *first.shape[1:]))
    text = compare_markdown(previous, [moved, *quick_run.rows], quick_run.meta["device"])
    assert "1 row(s) of ours had no match in the earlier run: `" + moved.case in text
    assert (
        cli.main(["--quick", "--device", "cpu", "--compare", str(tmp_path / "missing.jsonl")]) == 2
    )


def test_bad_output_and_compare_files_are_refused_first(tmp_path, capsys, monkeypatch):
    """Before any device work (the ceilings): an --out that cannot be written, a --compare
    that is not a results file or is the one this run would write over, a --dlmc file."""
    from sparsekernels.bench import runner

    monkeypatch.setattr(runner, "measure_ceilings", lambda *a: pytest.fail("device work ran"))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "nometa.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text('{"meta": {}}\n')
    cases = [
        (["--out", str(a_file)], "--out .*cannot write there"),
        (["--out", str(a_file / "sub")], "--out .*cannot write there"),
        (["--compare", str(tmp_path / "empty.jsonl")], "empty.jsonl: not a results.jsonl"),
        (["--compare", str(tmp_path / "nometa.jsonl")], "nometa.jsonl: not a results.jsonl"),
        (["--compare", str(tmp_path / "notes.md")], "notes.md: not a readable results.jsonl"),
        (
            ["--out", str(tmp_path / "out"), "--compare", str(tmp_path / "out/results.jsonl")],
            "--compare is the results file this run writes",
        ),  # fmt: skip
        (["--dlmc", str(a_file)], "--dlmc .*: not a folder"),
    ]
    for extra, message in cases:
        assert cli.main(["--quick", "--device", "cpu", *extra]) == 2
        assert re.search(message, capsys.readouterr().err), message


def test_match_keeps_the_named_cases(tmp_path):
    """--match runs only the cases whose name contains the text; a text no case has is an
    error before any timing."""
    all_cases = suites.build(["quick"], suites.Context(CPU))
    wanted = all_cases[1].name.split(" ")[0]  # an op name, e.g. "linear"
    config = runner.RunConfig(["quick"], CPU, out=tmp_path, match=(wanted,), plots=False)
    result = runner.run(config, console=Console(file=io.StringIO()))
    assert result.rows and all(r.case.startswith(wanted) for r in result.rows)
    kept = [c for c in all_cases if wanted in c.name]
    assert 0 < len(kept) < len(all_cases)
    assert len({r.case for r in result.rows}) == len(kept)
    none = runner.RunConfig(["quick"], CPU, out=tmp_path, match=("no such case",))
    with pytest.raises(ValueError, match="no such case"):
        runner.run(none, console=Console(file=io.StringIO()))


def test_summary_lists_both_copy_ceilings():
    """The CUDA run's graph-timed copy ceilings (256 MiB and 1 GiB) show beside the first; a
    CPU run has only the first."""
    meta = {k: "x" for k in ("command", "device", "date", "hostname", "torch", "triton")}
    meta.update(cuda="13.0", python="3.12")
    meta["ceilings"] = {
        "copy_gbps": 2765.0, "copy_gbps_graph_256mib": 4241.0, "copy_gbps_graph_1gib": 4100.5,
    }  # fmt: skip
    text = output.summary_markdown(meta, [])
    assert "| copy bandwidth (read+write) | 2765.0 GB/s |" in text
    assert "| copy bandwidth, 256 MiB as a CUDA graph | 4241.0 GB/s |" in text
    assert "| copy bandwidth, 1 GiB as a CUDA graph | 4100.5 GB/s |" in text
    meta["ceilings"].pop("copy_gbps_graph_256mib")
    meta["ceilings"].pop("copy_gbps_graph_1gib")
    assert "CUDA graph" not in output.summary_markdown(meta, [])


def test_copy_roof_is_the_highest_copy_measured():
    """Plots' bandwidth roof: the fastest copy of the run (256 MiB as a graph on the H200, not
    the 1 GiB copy 1.5x slower), the first alone on a CPU run, none without copies."""
    from sparsekernels.bench.ceilings import copy_roof_gbps

    ceilings = {
        "copy_gbps": 2765.0,
        "copy_gbps_graph_256mib": 4241.0,
        "copy_gbps_graph_1gib": 2766.2,
    }
    assert copy_roof_gbps(ceilings) == 4241.0
    assert copy_roof_gbps({"copy_gbps": 51.5, "matmul_tflops": {}}) == 51.5
    assert copy_roof_gbps({"matmul_tflops": {}}) is None


def test_summary_compares_attention_memory():
    """CUDA attention rows (peak memory recorded) get a table of ours against sdpa and
    sdpa_mask, the routed row preferred to our faster one; rows without memory (CPU) none."""
    from sparsekernels.bench.cases import AUTOMATIC_ROUTE

    def row(provider, ms, mib, ours=False, note=""):
        return harness.Row(
            op="attention", format="csr", pattern="local:256", shape=(16, 8192, 64),
            density=0.03, dtype="bf16", provider=provider, ours=ours, status="ok",
            time_ms=ms, peak_mb=mib, note=note,
        )  # fmt: skip

    meta = {k: "x" for k in ("command", "device", "date", "hostname", "torch", "triton")}
    meta.update(cuda="13.0", python="3.12")
    rows = [
        row("sk_fused", 0.5, 10.0, ours=True, note=AUTOMATIC_ROUTE),
        row("sk_triton", 0.4, 40.0, ours=True),
        row("sdpa", 0.6, 12.0),
        row("sdpa_mask", 3.0, 2100.0),
    ]
    text = output.summary_markdown(meta, rows)
    assert "## Attention memory" in text
    assert "| sk_fused 10 | 12 | 2.1e+03 | 1.2 | 210 |" in text
    for r in rows:
        r.peak_mb = None
    assert "## Attention memory" not in output.summary_markdown(meta, rows)
