"""FSDP2 (fully_shard) trains sparse layers as one process does: two gloo ranks on the CPU,
each with half the batch, against the same steps unsharded (tests/_fsdp_worker.py)."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("config", ["2:8", "70%", "4:8,v=4,b=4"])
def test_fully_shard_trains_as_one_process(config):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
               str(HERE / "_fsdp_worker.py"), config]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "terminate called without an active exception" in run.stderr:
        # (seen once in CI, not in 28 runs here: a rank aborting in gloo's threads; once more)
        command[command.index("--master_port") + 1] = str(_free_port())
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["got"] == pytest.approx(result["want"], rel=1e-12, abs=1e-15)
