"""Health monitors (embodied_rl/health/) and what the runner does with their alarms
(runtime/health_keeper.py): each monitor fires on its failure shape and stays silent on the
shipped PushCube recipe's recorded metrics; the watch's state resumes exactly; a rollback goes to
the newest checkpoint before the onset and lowers the learning rates; config misuse is refused."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied_rl.config.schema.health import HealthConfig
from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError
from embodied_rl.health import HealthWatch
from embodied_rl.health.monitors import MONITORS
from embodied_rl.runtime import checkpoint as ckpt
from embodied_rl.runtime.health_keeper import (
    HealthKeeper,
    checkpoint_before,
    keep_best,
    set_aside_after,
)
from embodied_rl.workers.actor.optim import build_scheduler, set_lr_scale

# 40 steps of the main job (configs/maniskill_ppo_from_sft.yaml, runner seed 1234): the metrics the
# monitors read, as logged. A recipe that learns must raise no alarm.
RECIPE = Path(__file__).parent / "data" / "health_recipe_push_cube.jsonl"


def policy_step(**values: float) -> dict[str, float]:
    """A step's metrics with a policy update: what the actor logs, healthy unless overridden."""
    base = {"train/actor/approx_kl": 0.1, "train/actor/clip_fraction": 0.02, "train/actor/grad_norm": 0.5,
            "train/actor/entropy": 0.3, "train/critic/explained_variance": 0.5, "train/critic/warmup": 0.0,
            "train/actor/total_loss": 1.0, "train/actor/nonfinite_grad_steps": 0.0, "env/success_once": 0.3, "env/return": 10.0}
    return {**base, **values}


def kinds(watch: HealthWatch, steps: list[dict[str, float]]) -> list[tuple[int, str]]:
    return [(i + 1, a.kind) for i, m in enumerate(steps) for a in watch.observe(i + 1, m)]


def recipe_steps() -> list[dict[str, float]]:
    return [json.loads(line) for line in RECIPE.read_text().splitlines()]


def test_silent_on_the_shipped_recipe() -> None:
    steps = recipe_steps()
    assert len(steps) == 40 and sum(s.get("train/critic/warmup", 0) for s in steps) == 3
    assert kinds(HealthWatch(HealthConfig()), steps) == []


@pytest.mark.parametrize(("failure", "expected"), [
    # an update far larger than the ones before (the recipe's lr x 100)
    ([policy_step()] * 5 + [policy_step(**{"train/actor/approx_kl": 3.0, "train/actor/clip_fraction": 0.6})], {(6, "kl_spike"), (6, "clip_spike")}),
    ([policy_step()] * 5 + [policy_step(**{"train/actor/grad_norm": 50.0})], {(6, "grad_spike")}),
    # a NaN loss, and a gradient the actor skipped
    ([policy_step(), policy_step(**{"train/actor/total_loss": math.nan})], {(2, "nonfinite")}),
    ([policy_step(**{"train/actor/nonfinite_grad_steps": 1.0})], {(1, "nonfinite")}),
    # the sampled policy turning deterministic
    ([policy_step()] * 10 + [policy_step(**{"train/actor/entropy": 0.05})], {(11, "entropy_collapse")}),
    # a critic that learns nothing (value lr 0): checked after its 2 grace steps, said once
    ([policy_step(**{"train/critic/explained_variance": -0.1})] * 6, {(3, "critic_collapse")}),
    # training success halving after a good start: said once, again only after a recovery
    ([policy_step(**{"env/success_once": 0.4})] * 5 + [policy_step(**{"env/success_once": 0.1})] * 5, {(9, "success_drop")}),
    ([policy_step(**{"env/success_once": 0.4})] * 5 + [policy_step(**{"env/success_once": 0.1})] * 5
     + [policy_step(**{"env/success_once": 0.4})] * 5 + [policy_step(**{"env/success_once": 0.1})] * 5,
     {(9, "success_drop"), (19, "success_drop")}),
])
def test_each_monitor_fires_on_its_failure(failure: list[dict[str, float]], expected: set[tuple[int, str]]) -> None:
    assert set(kinds(HealthWatch(HealthConfig()), failure)) == expected


def test_dead_start_fires_once_with_what_helps() -> None:
    watch = HealthWatch(HealthConfig())
    nothing = policy_step(**{"env/return": 0.0, "env/success_once": 0.0, "train/critic/explained_variance": -0.3})
    alarms = [a for step in range(1, 11) for a in watch.observe(step, nothing)]
    assert [(a.kind, a.step, a.onset) for a in alarms] == [("dead_start", 5, 1)]  # and no critic alarm: nothing to explain
    assert "no reward and no success in the first 5 training steps" in alarms[0].line()
    assert "SFT policy" in alarms[0].line() and "reward_mode=normalized_dense" in alarms[0].line()
    # a start that earns anything is alive, and never checked again
    live = HealthWatch(HealthConfig())
    assert kinds(live, [policy_step(**{"env/return": 0.5, "env/success_once": 0.0})] + [nothing] * 9) == []


def test_critic_only_steps_are_not_policy_updates() -> None:
    """The recipe's warm-up steps log the critic's large gradient norm and approx_kl 0: they set
    no running level for the policy monitors."""
    warm = policy_step(**{"train/critic/warmup": 1.0, "train/actor/grad_norm": 9.0, "train/actor/approx_kl": 0.0})
    assert kinds(HealthWatch(HealthConfig()), [warm] * 3 + [policy_step()] * 5) == []


def test_ignore_turns_a_monitor_off_and_every_section_is_a_monitor() -> None:
    cfg = load_config("maniskill_ppo_from_sft", ["runner.health.kl_spike.action=ignore"], plan=False).runner.health
    assert kinds(HealthWatch(cfg), [policy_step()] * 5 + [policy_step(**{"train/actor/approx_kl": 3.0})]) == []
    sections = {name for name in vars(HealthConfig()) if hasattr(getattr(HealthConfig(), name), "action")}
    assert sections == set(MONITORS.names())


def test_a_resumed_watch_raises_what_an_uninterrupted_one_does() -> None:
    steps = [policy_step(**{"env/success_once": 0.4})] * 6 + [policy_step(**{"env/success_once": 0.05,
                                                                               "train/actor/approx_kl": 2.5})] * 6
    whole = kinds(HealthWatch(HealthConfig()), steps)
    first = HealthWatch(HealthConfig())
    head = kinds(first, steps[:7])
    second = HealthWatch(HealthConfig())
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))  # what a checkpoint carries
    tail = [(i + 8, a.kind) for i, m in enumerate(steps[7:]) for a in second.observe(i + 8, m)]
    assert whole and head + tail == whole


def _checkpoint(run: Path, step: int) -> Path:
    with ckpt.checkpoint_writer(run, step) as tmp:
        (tmp / "actor").mkdir()
        ckpt.write_runner_state(tmp, global_step=step, weight_version=step, config_yaml="{}\n")
    return run / ckpt.CKPT_DIR / ckpt.step_dir_name(step)


def test_rollback_goes_before_the_onset_then_stops_when_none_is_left(tmp_path: Path) -> None:
    cfg = load_config("maniskill_ppo_from_sft", ["runner.save_interval=2", "runner.health.success_drop.action=rollback",
                                                 "runner.health.max_rollbacks=1"], plan=False).runner
    for step in (2, 4, 6, 8):
        _checkpoint(tmp_path, step)
    keeper = HealthKeeper(cfg, tmp_path)
    good, bad = policy_step(**{"env/success_once": 0.4}), policy_step(**{"env/success_once": 0.05})
    alarms = next(a for step, m in enumerate([good] * 5 + [bad] * 4, start=1) if (a := keeper.check(step, m)))
    # the window of steps 4-8 falls below half the best window's mean: the failure began at step 4
    assert (alarms[0].kind, alarms[0].step, alarms[0].onset) == ("success_drop", 8, 4)
    verdict = keeper.verdict(alarms)
    assert verdict.stop is None and verdict.rollback_to == tmp_path / "checkpoints" / "global_step_00000002"
    keeper.rolled_back(8, 2)
    set_aside_after(tmp_path, 2, keeper.rollbacks)
    assert ckpt.latest_checkpoint(tmp_path).name == "global_step_00000002"
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "rolled_back_1").iterdir()) == [
        "global_step_00000004", "global_step_00000006", "global_step_00000008"]
    assert keeper.lr_scale == 0.5
    again = keeper.verdict(alarms)
    assert again.rollback_to is None and "no rollback left (runner.health.max_rollbacks=1)" in again.stop
    records = [json.loads(line) for line in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records] == ["alarm", "rollback"] and records[1]["lr_scale"] == 0.5
    assert checkpoint_before(tmp_path, 2) is None  # nothing before step 2: a rollback there stops the run


def test_a_rollback_keeps_the_best_evaluation_its_checkpoint_does_not_know(tmp_path: Path) -> None:
    """The step-0 checkpoint is saved before the step-0 evaluation: rolled back there, an equal
    later evaluation must not become checkpoints/best (the first of the highest stays)."""
    cfg = load_config("maniskill_ppo_from_sft", ["runner.save_best=true"], plan=False).runner
    keeper = HealthKeeper(cfg, tmp_path)
    at_start = keeper.state_dict()  # what the step-0 checkpoint holds
    assert keeper.new_best(0, 0.25)
    keeper.load_state_dict(at_start, rollback=True)
    assert not keeper.new_best(2, 0.25) and keeper.new_best(3, 0.3)
    resumed = HealthKeeper(cfg, tmp_path)
    resumed.load_state_dict(keeper.state_dict())  # a resume takes the checkpoint's record
    assert resumed.best == 0.3


def test_best_checkpoint_survives_a_resave_of_its_step(tmp_path: Path) -> None:
    step_dir = _checkpoint(tmp_path, 3)
    best = keep_best(tmp_path, step_dir, {"global_step": 3, "eval/success_once": 0.5})
    meta = (best / "meta.json").read_text()
    _checkpoint(tmp_path, 3)  # the same step saved again (after a rollback): a new directory
    assert (best / "meta.json").read_text() == meta and json.loads((best / "best.json").read_text())["global_step"] == 3
    assert ckpt.resolve_resume_dir(str(best), tmp_path) == best  # export and eval take it as a checkpoint


def test_lr_scale_sets_base_rates_from_the_config() -> None:
    """After a checkpoint's scheduler state is loaded, the config's rates x scale are in force."""
    cfg = load_config("maniskill_ppo_from_sft", ["actor.optim.lr_warmup_steps=4"], plan=False).actor.optim
    head, body = torch.nn.Linear(2, 1), torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW([{"params": body.parameters(), "lr": 1.0, "name": "policy"},
                             {"params": head.parameters(), "lr": 1.0, "name": "value_head"}])
    sched = build_scheduler(opt, cfg, total_steps=10)
    sched.step()  # step 1 of the warm-up: x 2/4
    set_lr_scale(sched, cfg, 0.5)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([cfg.lr * 0.5 * 2 / 4, cfg.value_lr * 0.5 * 2 / 4])
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([cfg.lr * 0.5 * 3 / 4, cfg.value_lr * 0.5 * 3 / 4])


@pytest.mark.parametrize(("overrides", "message"), [
    (["runner.health.kl_spike.action=rollback"], "needs checkpoints to roll back to"),
    (["runner.health.kl_spike.action=rollback", "runner.save_interval=5", "runner.health.max_rollbacks=0"], "can never roll back"),
    (["runner.save_best=true", "runner.val_check_interval=-1"], "evaluates only before training"),
    (["runner.health.history=2"], "runner.health.history=2: must be >= 3"),
    (["runner.health.clip_spike.factor=1"], "runner.health.clip_spike.factor=1.0: must be > 1"),
    (["runner.health.success_drop.fraction=1.5"], "must be in (0, 1)"),
    (["runner.health.rollback_lr_factor=2"], "runner.health.rollback_lr_factor=2.0: must be in (0, 1]"),
    (["runner.health.dead_start.action=rollback"], "expected one of 'ignore', 'warn', 'stop'"),
])
def test_misuse_is_one_line_before_start(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        load_config("maniskill_ppo_from_sft", overrides, plan=False)
    assert message in str(err.value) and "\n" not in str(err.value)
