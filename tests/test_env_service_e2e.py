"""Proof of isolation, through the real CLI: PPO on ManiSkill PushCube-v1 served from a second
virtual environment (.venv-envserver, made by `bash scripts/setup.sh --env-server`: ManiSkill with
numpy 1.x, where the trainer's .venv has numpy 2.x) while the trainer's processes (driver and Ray
workers) cannot import the simulator, and a run whose env server is killed mid-step and goes on.

The trainer runs with tests/faults first on its PYTHONPATH and ERL_BLOCK_IMPORTS=mani_skill,sapien
(tests/faults/sitecustomize.py makes those imports fail in every process that inherits this
environment). A spawned env server gets PYTHONPATH = the package root only (its interpreter's own
environment provides the rest), so the simulator loads there and nowhere else.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.cli_runs import ONE_SLOT, read_metrics, run_cli
from tests.tiny_runs import EVAL_64, tiny_run

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

FAULTS = Path(__file__).parent / "faults"
BLOCKED = "mani_skill,sapien"
SECOND_ENV = Path(__file__).resolve().parents[1] / ".venv-envserver"


def _second_env_python() -> Path:
    python = SECOND_ENV / "bin" / "python"
    assert python.is_file(), f"{python} is missing: make it with `bash scripts/setup.sh --env-server` (scripts/run.sh test does)"
    return python


def _served_run(out: Path, model: Path, python: str, *, evaluate: bool) -> str:
    server = {"python": python}
    env = {"train": {"total_num_envs": 2, "server": server},
           "eval": {**EVAL_64, "total_num_envs": 1, "auto_reset": False, "ignore_terminations": True, "max_episode_steps": 8,
                    "server": server}}
    runner = {"experiment_name": "served", "val_check_interval": 2 if evaluate else -1, "val_before_train": False}
    return tiny_run(out, model, {
        "defaults": ["env/maniskill_push_cube@env.train", "env/maniskill_push_cube@env.eval"],
        "runner": runner, "env": env, "actor": {"global_batch_size": 4},
        "algorithm": {"eval_rollout_epoch": 1, "sampling_params": {"eval_scoring": ["greedy"]}},
    })


def _block_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("ERL_BLOCK_IMPORTS", BLOCKED)
    probe = subprocess.run([sys.executable, "-c", "import mani_skill"], capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "No module named 'mani_skill'" in probe.stderr, probe.stderr


def test_a_simulator_the_trainer_cannot_import_trains_evaluates_and_survives_its_server_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run shows both (each run costs minutes in CI): the servers build the simulator the
    trainer cannot import; the first server to reach its 3rd step kills itself, its episodes in
    flight are reported failed, it is restarted, and the run trains its 2 steps and evaluates."""
    _block_simulator(monkeypatch)
    marker = tmp_path / "server_killed"
    monkeypatch.setenv("ERL_FAULT_KILL_ENV_SERVER", str(marker))
    # The server's interpreter: the second environment's, with the fault hook on its path (the
    # trainer's PYTHONPATH does not reach it) and the simulator importable.
    second = _second_env_python()
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nunset ERL_BLOCK_IMPORTS\nPYTHONPATH="{FAULTS}:$PYTHONPATH" exec {second} "$@"\n')
    python.chmod(0o755)
    (tmp_path / "served.yaml").write_text(_served_run(tmp_path / "runs", tmp_path / "tiny", str(python), evaluate=True))
    proc = run_cli("train", str(tmp_path / "served.yaml"), ONE_SLOT, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "sub-envs of maniskill" in out  # the servers built the simulator
    assert marker.is_file(), "the server was not killed"
    assert "failed during step: connection lost during step" in out and "its episodes in flight count as failed" in out
    metrics = read_metrics(tmp_path / "runs" / "served")
    assert sorted(metrics) == [1, 2]
    assert metrics[1]["env/fail_rate"] > 0  # the episodes in flight, reported failed
    assert metrics[2]["env/fail_rate"] == 0 and metrics[2]["env/num_trajectories"] > 0
    assert metrics[2]["eval/num_trajectories"] >= 1 and 0.0 <= metrics[2]["eval/success_once"] <= 1.0
    # environment.json records the servers' interpreter and versions beside the env worker's own
    (worker,) = json.loads((tmp_path / "runs" / "served" / "environment.json").read_text())["env_workers"]
    (server,) = worker["env_servers"]
    assert server["server"] == str(python) and server["executable"] == str(second) and server["packages"]["mani-skill"]
    # the simulator ran on the second environment's numpy (1.x), the trainer on its own (2.x)
    assert server["packages"]["numpy"].startswith("1.") and metadata.version("numpy").startswith("2."), server["packages"]
