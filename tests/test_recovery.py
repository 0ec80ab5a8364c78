"""A worker process that dies mid-step (SIGKILL, as the OOM killer or a lost node would) does
not end the run: the runner stops the other workers at once, starts the groups again, resumes
from the last checkpoint and finishes `max_steps`, with exactly the metrics of a run that was
never interrupted (resume is bit-exact) and `recovery/restarts` counting the restart.

The victim is found the way an operator would: by its process title and the run tag every worker
process carries (`embodied_rl.runtime.groups.run_worker_pids`).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from embodied_rl.runtime.groups import run_worker_pids
from tests.cli_runs import (
    SMALL_PPO,
    read_metrics,
    run_cli,
    start_cli,
    wait_for_checkpoint,
)

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recovery")
    (root / "configs").mkdir()
    (root / "configs" / "rec.yaml").write_text(SMALL_PPO.format(out=root / "runs", model=root / "tiny-oft", max_restarts=1))
    return root


@pytest.fixture(scope="module")
def uninterrupted(workdir: Path) -> dict[int, dict]:
    run_cli("train", str(workdir / "configs" / "rec.yaml"), "runner.experiment_name=whole", cwd=workdir)
    return read_metrics(workdir / "runs" / "whole")


def _learning(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(("train/", "env/", "rollout/"))}


@pytest.mark.parametrize("victim", ["EnvWorker", "RolloutWorker", "ActorWorker"])
def test_run_survives_a_killed_worker(workdir: Path, uninterrupted: dict[int, dict], victim: str):
    name = "kill_" + victim.removesuffix("Worker").lower()
    run = workdir / "runs" / name
    proc = start_cli("train", str(workdir / "configs" / "rec.yaml"), f"runner.experiment_name={name}", cwd=workdir)
    try:
        wait_for_checkpoint(proc, run, 1)  # step 2 is under way once step 1 is saved
        pids = run_worker_pids(name, victim)
        assert pids, f"no {victim} process of run {name}"
        os.kill(pids[-1], signal.SIGKILL)
        killed_at = time.monotonic()
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    assert "a worker died" in out and "restart 1 of 1" in out, out[-4000:]
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2, 3]
    assert metrics[3]["recovery/restarts"] == 1.0 and metrics[1]["recovery/restarts"] == 0.0
    for step in (1, 2, 3):
        assert _learning(metrics[step]) == _learning(uninterrupted[step]), step
    assert time.monotonic() - killed_at < 600
