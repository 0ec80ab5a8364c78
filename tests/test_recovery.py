"""A worker process that dies mid-step (SIGKILL, as the OOM killer or a lost node would) does
not end the run: the runner stops the other workers at once, starts the groups again, resumes
from the last checkpoint and finishes `max_steps`, with exactly the metrics of a run that was
never interrupted (resume is bit-exact) and `recovery/restarts` counting the restarts. One run
loses each kind of worker in turn (an env worker in step 2, a rollout worker in step 3, an actor
worker in step 4: each restart also survives the ones before it) and, once it has exited,
leaves no process or shared-memory segment behind.

The victim is found the way an operator would: by its process title and the run tag every worker
process carries (`embodied_rl.runtime.groups.run_worker_pids`).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from embodied_rl.distributed.shm import SHM_DIR
from embodied_rl.runtime.groups import run_worker_pids
from tests.cli_runs import (
    leftovers,
    read_metrics,
    run_cli,
    small_ppo,
    start_cli,
    wait_for_checkpoint,
)

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]


VICTIMS = ("EnvWorker", "RolloutWorker", "ActorWorker")  # killed in steps 2, 3 and 4
STEPS = len(VICTIMS) + 1


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recovery")
    (root / "configs").mkdir()
    (root / "configs" / "rec.yaml").write_text(
        small_ppo(root / "runs", root / "tiny-oft", len(VICTIMS)))
    return root


def _learning(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(("train/", "env/", "rollout/"))}


def test_run_survives_a_killed_worker_of_each_kind(workdir: Path):
    config, steps = str(workdir / "configs" / "rec.yaml"), f"runner.max_steps={STEPS}"
    run_cli("train", config, "runner.experiment_name=whole", steps, cwd=workdir)
    uninterrupted = read_metrics(workdir / "runs" / "whole")

    name, shm_before = "kill_each", set(os.listdir(SHM_DIR))
    run = workdir / "runs" / name
    proc = start_cli("train", config, f"runner.experiment_name={name}", steps, cwd=workdir)
    try:
        for step, victim in enumerate(VICTIMS, start=1):
            wait_for_checkpoint(proc, run, step)  # step + 1 is under way once `step` is saved
            pids = run_worker_pids(name, victim)
            assert pids, f"no {victim} process of run {name} in step {step + 1}"
            os.kill(pids[-1], signal.SIGKILL)
            killed_at = time.monotonic()
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    assert time.monotonic() - killed_at < 600
    for k in range(1, len(VICTIMS) + 1):
        assert f"restart {k} of {len(VICTIMS)}" in out, out[-4000:]
    metrics = read_metrics(run)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert [metrics[s]["recovery/restarts"] for s in sorted(metrics)] == [0.0, 1.0, 2.0, 3.0]
    for step in metrics:
        assert _learning(metrics[step]) == _learning(uninterrupted[step]), step
    left, segments = leftovers(name, out, shm_before)
    assert not left and not segments, (left, segments)
