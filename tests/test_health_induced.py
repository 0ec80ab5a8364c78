"""Failures induced in real runs through the CLI, each caught by its health monitor within 5 steps
of its onset and handled as configured (the learning rate x 100 collapse and its rollback are in
tests/test_health_e2e.py):

- a NaN in a gradient (tests/faults/sitecustomize.py fills one at the run's first gradient
  clipping): the actor skips that optimizer step, `nonfinite` fires at step 1 and rolls the run
  back to its start; the checkpoint set aside holds only finite weights and the run trains on;
- a critic whose learning rate is 0: `critic_collapse` fires once its grace steps are over and,
  set to stop, ends the run with exit 1, one line and a resumable checkpoint;
- a fresh policy on sparse reward: `dead_start` says once, at step 5, that nothing was earned and
  what usually helps, and the run goes on to its last step.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.cli_runs import ONE_SLOT, read_metrics, run_cli, run_cli_failing

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

FAULTS = Path(__file__).parent / "faults"
# The PushCube recipe from the shipped SFT policy, shrunk: one epoch of the fewest sub-envs, one
# minibatch, no critic-only steps, no evaluation, a checkpoint every step, one worker of each kind.
SMALL = [ONE_SLOT, "algorithm.rollout_epoch=1", "env.train.groups_per_stage=1", "algorithm.n_minibatches=1", "runner.critic_warmup=0",
         "runner.val_before_train=false", "runner.val_check_interval=-1", "runner.save_interval=1",
         "runner.logger.logger_backends=[console]", "env.train.video_cfg.save_video=false"]


def _tensors(dcp_dir: Path, scratch: Path) -> list[torch.Tensor]:
    """Every tensor of an actor checkpoint (weights and optimizer state), read whole."""
    dcp_to_torch_save(dcp_dir, scratch)

    def walk(obj):
        if isinstance(obj, dict):
            for v in obj.values():
                yield from walk(v)
        elif isinstance(obj, torch.Tensor):
            yield obj

    return list(walk(torch.load(scratch, weights_only=True)))


def _health(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "health.jsonl").read_text().splitlines()]


def _alarms(records: list[dict]) -> set[tuple[str, int, str]]:
    return {(r["kind"], r["step"], r["action"]) for r in records if r["event"] == "alarm"}


def test_a_nan_gradient_is_skipped_caught_and_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "nan_injected"
    monkeypatch.setenv("ERL_FAULT_NAN_GRAD", str(marker))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")])))
    # Episodes of 2 chunks: the fault is in the run's first gradient, whatever batch it comes from.
    proc = run_cli("train", "maniskill_ppo_from_sft", *SMALL, "runner.max_steps=2", "env.train.max_episode_steps=16",
                   "runner.health.nonfinite.action=rollback", "runner.health.max_rollbacks=1", "runner.experiment_name=nan", cwd=tmp_path)
    assert marker.is_file(), "the fault was not injected"
    run = tmp_path / "runs" / "nan"
    records = _health(run)
    assert ("nonfinite", 1, "rollback") in _alarms(records), records
    assert {"event": "rollback", "from_step": 1, "to_step": 0, "rollback": 1, "lr_scale": 0.5} in records, records
    assert "health: nonfinite at step 1: train/actor/nonfinite_grad_steps = 1" in proc.stdout
    # The step with the NaN skipped its update: the checkpoint set aside holds finite weights only.
    aside = _tensors(run / "checkpoints" / "rolled_back_1" / "global_step_00000001" / "actor" / "dcp", tmp_path / "aside.pt")
    assert len(aside) > 100 and all(bool(t.isfinite().all()) for t in aside if t.is_floating_point())
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2]
    assert all(m["train/actor/nonfinite_grad_steps"] == 0 and math.isfinite(m["train/actor/total_loss"]) for m in metrics.values())


def test_a_critic_that_never_learns_stops_the_run(tmp_path: Path) -> None:
    proc = run_cli_failing("train", "maniskill_ppo_from_sft", *SMALL, "runner.max_steps=8", "actor.optim.value_lr=0",
                           "runner.health.critic_collapse.action=stop", "runner.experiment_name=critic", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    run = tmp_path / "runs" / "critic"
    (alarm,) = [r for r in _health(run) if r["event"] == "alarm"]
    grace, span = 2, 3  # runner.health.critic_collapse defaults
    checked = max(grace + 1, span)  # the first step it is checked: past its grace, with span values
    assert (alarm["kind"], alarm["step"], alarm["action"]) == ("critic_collapse", checked, "stop")
    assert alarm["value"] <= 0.0 and alarm["onset"] == 1
    assert sorted(read_metrics(run)) == list(range(1, checked + 1))
    assert (run / "checkpoints" / f"global_step_{checked:08d}" / "meta.json").is_file()
    said = proc.stdout + proc.stderr
    assert f"stopped at global step {checked} by critic_collapse at step {checked}: train/critic/explained_variance = " in said


def test_a_dead_start_is_said_once_with_what_helps(tmp_path: Path) -> None:
    # Episodes of 2 chunks and one update epoch (of their 4 samples): the monitor reads each
    # step's returns, not how much was collected or learned.
    proc = run_cli("train", "maniskill_ppo_tiny", ONE_SLOT, "runner.max_steps=6", "env.train.init_params.reward_mode=sparse",
                   "env.train.max_episode_steps=16", "algorithm.update_epoch=1", "actor.micro_batch_size=4",
                   "env.train.video_cfg.save_video=false", "env.eval.video_cfg.save_video=false",
                   "runner.logger.logger_backends=[console]", "runner.experiment_name=dead", cwd=tmp_path)
    run = tmp_path / "runs" / "dead"
    records = _health(run)
    assert _alarms(records) == {("dead_start", 5, "warn")}, records
    assert proc.stdout.count("no episode has earned reward or succeeded yet; what usually helps: start from an SFT policy") == 1
    metrics = read_metrics(run)
    assert sorted(metrics) == list(range(1, 7))
    assert all(m["env/return"] == 0 and m["env/success_once"] == 0 for s, m in metrics.items() if s <= 5)
