"""A collapse caught and rolled back, through the real CLI: the PushCube recipe from the shipped
SFT policy with its learning rate x 100. The first update moves the policy far more than any
healthy one (approx-KL ~10 against the recipe's 0.1-0.7), the KL and clip-fraction monitors fire
at step 1, the run goes back to its start checkpoint with the learning rates x 0.01 and trains on
with no update too large again, keeping its best evaluation (the one before training included) in
checkpoints/best. A resume from that start
checkpoint with the lowered rates set in the config repeats the rolled-back run's next step
exactly: the rollback leaves no state behind that a resume would not have."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runs import ONE_SLOT, read_metrics, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

SMALL = [ONE_SLOT, "runner.max_steps=3", "algorithm.rollout_epoch=1", "env.train.groups_per_stage=1", "algorithm.n_minibatches=1",
         "runner.critic_warmup=0", "runner.val_check_interval=2", "algorithm.eval_rollout_epoch=1",
         "algorithm.sampling_params.eval_scoring=[greedy]", "runner.save_interval=1", "runner.logger.logger_backends=[console]"]
LR, VALUE_LR, FACTOR = 2e-2, 1e-3, 0.01  # the recipe's lr x 100; its value lr; the rollback's factor
ROLLBACK = [f"actor.optim.lr={LR}", "runner.health.kl_spike.action=rollback", "runner.health.clip_spike.action=rollback",
            "runner.health.max_rollbacks=1", f"runner.health.rollback_lr_factor={FACTOR}", "runner.save_best=true"]


def _learning(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(("train/", "env/", "rollout/"))}


def test_a_collapse_is_rolled_back_and_the_run_trains_on(tmp_path: Path) -> None:
    proc = run_cli("train", "maniskill_ppo_from_sft", *SMALL, *ROLLBACK, "runner.experiment_name=lr100", cwd=tmp_path)
    run = tmp_path / "runs" / "lr100"
    records = [json.loads(line) for line in (run / "health.jsonl").read_text().splitlines()]
    rollback = next(i for i, r in enumerate(records) if r["event"] == "rollback")
    before, after = records[:rollback], records[rollback + 1:]
    alarms = [a for a in before if a["event"] == "alarm"]
    assert {(a["kind"], a["step"], a["action"]) for a in alarms} == {("kl_spike", 1, "rollback"), ("clip_spike", 1, "rollback")}, records
    kl = next(a for a in alarms if a["kind"] == "kl_spike")
    assert kl["value"] > 1.0 and "health: kl_spike at step 1: train/actor/approx_kl = " in proc.stdout
    assert records[rollback] == {"event": "rollback", "from_step": 1, "to_step": 0, "rollback": 1, "lr_scale": FACTOR}
    # after it no update is too large; the critic, at 0.01 x its learning rate, may be warned about
    assert not [r for r in after if r["event"] == "alarm" and r["action"] != "warn"], after
    assert "health: rolled back from step 1 to step 0 (rollback 1 of 1); learning rates x0.01 from here" in proc.stdout
    # the collapsed step's checkpoint is set aside; the repeated steps train with the lowered rates
    assert (run / "checkpoints" / "rolled_back_1" / "global_step_00000001" / "meta.json").is_file()
    metrics = read_metrics(run)
    assert sorted(metrics) == [0, 1, 2, 3]  # the evaluation before training, then the steps
    assert not [k for m in metrics.values() for k in m if k in ("health/kl_spike", "health/clip_spike")]
    assert metrics[1]["train/actor/lr"] == pytest.approx(LR * FACTOR) and metrics[1]["train/critic/lr"] == pytest.approx(VALUE_LR * FACTOR)
    assert metrics[1]["train/actor/approx_kl"] < 1.0
    # checkpoints/best is the first evaluation with the highest success (the start, steps 2 and 3)
    scores = {s: m["eval/success_once"] for s, m in metrics.items() if "eval/success_once" in m}
    assert sorted(scores) == [0, 2, 3]
    top = min(s for s in scores if scores[s] == max(scores.values()))
    best = json.loads((run / "checkpoints" / "best" / "best.json").read_text())
    assert best["global_step"] == top and best["eval/success_once"] == scores[top]
    assert {"event": "best", "step": top, "eval/success_once": scores[top]} in records

    # A resume from the start checkpoint, with the rates the rollback set, repeats step 1 (no
    # evaluation: it would come after the step compared).
    run_cli("train", "maniskill_ppo_from_sft", *SMALL, "runner.max_steps=1", "runner.val_before_train=false",
            "runner.val_check_interval=-1", f"actor.optim.lr={LR * FACTOR}",
            f"actor.optim.value_lr={VALUE_LR * FACTOR}", f"runner.resume_dir={run / 'checkpoints' / 'global_step_00000000'}",
            "runner.experiment_name=resumed", cwd=tmp_path)
    resumed = read_metrics(tmp_path / "runs" / "resumed")
    assert _learning(resumed[1]) == _learning(metrics[1])
