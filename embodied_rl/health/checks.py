"""Rules of `runner.health` and `runner.save_best`: thresholds in range, and actions that have
what they need (a rollback needs checkpoints to go back to, a best checkpoint evaluations)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError
from embodied_rl.health.monitors import MIN_HISTORY

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


def _need(ok: bool, key: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"runner.health.{key}={value}: {rule}")


@RULES.config_check
def _thresholds(cfg: RootConfig) -> None:
    h = cfg.runner.health
    _need(h.history >= MIN_HISTORY, "history", h.history, f"must be >= {MIN_HISTORY} (the values a running level needs)")
    for kind in ("kl_spike", "clip_spike", "grad_spike"):
        spike = getattr(h, kind)
        _need(spike.factor > 1, f"{kind}.factor", spike.factor, "must be > 1 (at or below 1 every ordinary step is a spike)")
        _need(spike.floor >= 0, f"{kind}.floor", spike.floor, "must be >= 0")
    for key, value in (("entropy_collapse.fraction", h.entropy_collapse.fraction), ("success_drop.fraction", h.success_drop.fraction)):
        _need(0 < value < 1, key, value, "must be in (0, 1)")
    _need(h.critic_collapse.floor < 1, "critic_collapse.floor", h.critic_collapse.floor, "must be < 1 (explained variance is at most 1)")
    for key, value in (("critic_collapse.span", h.critic_collapse.span), ("success_drop.window", h.success_drop.window),
                       ("dead_start.steps", h.dead_start.steps)):
        _need(value >= 1, key, value, "must be >= 1")
    _need(h.critic_collapse.grace >= 0, "critic_collapse.grace", h.critic_collapse.grace, "must be >= 0")
    _need(0 <= h.success_drop.min_best <= 1, "success_drop.min_best", h.success_drop.min_best, "must be in [0, 1]")
    _need(h.max_rollbacks >= 0, "max_rollbacks", h.max_rollbacks, "must be >= 0")
    _need(0 < h.rollback_lr_factor <= 1, "rollback_lr_factor", h.rollback_lr_factor, "must be in (0, 1]")


@RULES.config_check
def _actions_have_what_they_need(cfg: RootConfig) -> None:
    h, r = cfg.runner.health, cfg.runner
    rollback = [f.name for f in dataclasses.fields(h) if getattr(getattr(h, f.name), "action", None) == "rollback"]
    if rollback and r.save_interval == -1:
        raise ConfigError(f"runner.health.{rollback[0]}.action=rollback needs checkpoints to roll back to, but runner.save_interval=-1 "
                          "saves only at the end; set runner.save_interval (e.g. 5) or another action (warn, stop)")
    if rollback and h.max_rollbacks == 0:
        raise ConfigError(f"runner.health.{rollback[0]}.action=rollback with runner.health.max_rollbacks=0 can never roll back; "
                          "set max_rollbacks >= 1 or action: stop")
    if r.save_best and r.val_check_interval == -1 and not r.only_eval:
        raise ConfigError("runner.save_best keeps the checkpoint of the best evaluation, but runner.val_check_interval=-1 "
                          "evaluates only before training; set runner.val_check_interval (e.g. 10) or save_best: false")
