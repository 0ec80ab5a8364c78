"""Monitors: one failure shape each, a pure function of the metrics of the steps seen so far.

A monitor sees every training step's metrics once, in order (`observe`), and returns an Alarm or
None. It keeps only the few numbers its rule needs, as plain floats (`state`), so that a resumed
or rolled-back run continues with the state its checkpoint saved. Actor metrics of critic-only
steps (`train/critic/warmup` = 1: no policy update, the gradient norm is the critic's) are not
the policy's and are skipped by the policy monitors.

Adding a monitor: a class here registered under its `runner.health` section's name, and that
section in config/schema/health.py.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from embodied_rl.health.alarm import Alarm
from embodied_rl.registry import Registry

Metrics = Mapping[str, float]
MONITORS: Registry[Callable[..., Monitor]] = Registry("health monitor")
#: Spike monitors compare with a running level once this many values are known.
MIN_HISTORY = 3


def policy_update(metrics: Metrics) -> bool:
    """A step whose actor metrics describe a policy update (not a critic-only warm-up step)."""
    return "train/actor/approx_kl" in metrics and not metrics.get("train/critic/warmup", 0.0)


class Monitor:
    kind = ""

    def __init__(self, cfg: Any, history: int) -> None:
        self.cfg, self.history = cfg, history
        self.state: dict[str, Any] = {}

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        raise NotImplementedError

    def rising(self, condition: bool) -> bool:
        """For a condition that lasts (a collapse, a drop): true only on the step it begins, so a
        run warned once is not warned again every step until it recovers."""
        was = self.state.get("active", False)
        self.state["active"] = condition
        return condition and not was

    def alarm(self, step: int, metric: str, value: float, threshold: float, *, onset: int | None = None,
              above: bool = True, hint: str = "", detail: str = "") -> Alarm:
        return Alarm(self.kind, metric, step, float(value), float(threshold), step if onset is None else onset,
                     self.cfg.action, above, hint, detail)


def earned_nothing(metrics: Metrics) -> bool:
    """A step whose episodes earned no reward and no success (nothing to learn from, or to explain)."""
    return "env/success_once" in metrics and abs(metrics.get("env/return", 0.0)) + metrics["env/success_once"] == 0


@MONITORS.register("nonfinite")
class Nonfinite(Monitor):
    """A loss or gradient norm that is NaN or infinite, or an optimizer step the actor skipped
    because its gradient was (the weights are intact, the update is lost)."""

    kind = "nonfinite"
    METRICS = ("train/actor/total_loss", "train/actor/policy_loss", "train/critic/value_loss", "train/actor/grad_norm",
               "train/sft/nll")

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        for key in self.METRICS:
            if key in metrics and not math.isfinite(metrics[key]):
                return self.alarm(step, key, metrics[key], math.inf, above=True)
        skipped = metrics.get("train/actor/nonfinite_grad_steps", 0.0)
        if skipped > 0:
            return self.alarm(step, "train/actor/nonfinite_grad_steps", skipped, 0.0)
        return None


class Spike(Monitor):
    """A policy-update metric above factor x the median of its last `history` values and above
    the floor (before 3 values are known: above the floor, if one is set): an update that moved
    the policy far more than the ones before it, or far more than any healthy one does."""

    metric = ""

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        if not policy_update(metrics) or self.metric not in metrics or not math.isfinite(metrics[self.metric]):
            return None
        value = float(metrics[self.metric])
        past: list[float] = self.state.setdefault("values", [])
        fired = None
        # Before a running level exists, only the floor (when set) can tell a spike.
        threshold = (max(self.cfg.floor, self.cfg.factor * statistics.median(past)) if len(past) >= MIN_HISTORY
                     else self.cfg.floor if self.cfg.floor > 0 else math.inf)
        if value > threshold:
            fired = self.alarm(step, self.metric, value, threshold)
        if fired is None:  # a spike does not raise the level the next value is compared with
            past.append(value)
            del past[:-self.history]
        return fired


@MONITORS.register("kl_spike")
class KlSpike(Spike):
    kind, metric = "kl_spike", "train/actor/approx_kl"


@MONITORS.register("clip_spike")
class ClipSpike(Spike):
    kind, metric = "clip_spike", "train/actor/clip_fraction"


@MONITORS.register("grad_spike")
class GradSpike(Spike):
    kind, metric = "grad_spike", "train/actor/grad_norm"


@MONITORS.register("entropy_collapse")
class EntropyCollapse(Monitor):
    """The policy's entropy below a fraction of its mean over the first `history` updates: the
    sampled policy has become (nearly) deterministic and stops exploring."""

    kind, metric = "entropy_collapse", "train/actor/entropy"

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        if not policy_update(metrics) or self.metric not in metrics:
            return None
        value, first = float(metrics[self.metric]), self.state.setdefault("first", [])
        if len(first) < self.history:
            first.append(value)
            return None
        threshold = self.cfg.fraction * statistics.fmean(first)
        return self.alarm(step, self.metric, value, threshold, above=False) if self.rising(value < threshold) else None


@MONITORS.register("critic_collapse")
class CriticCollapse(Monitor):
    """The critic's explained variance on each new batch, averaged over `span` steps, at or below
    a floor after its grace steps: a critic that never learned (e.g. its learning rate is 0) or
    lost what it had; its advantages are then noise."""

    kind, metric = "critic_collapse", "train/critic/explained_variance"

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        if self.metric not in metrics or not math.isfinite(metrics[self.metric]) or earned_nothing(metrics):
            return None  # returns that are all zero leave nothing to explain (dead_start says so)
        seen = self.state["seen"] = self.state.get("seen", 0) + 1
        recent: list[float] = self.state.setdefault("recent", [])
        recent.append(float(metrics[self.metric]))
        del recent[:-self.cfg.span]
        if seen <= self.cfg.grace or len(recent) < self.cfg.span:
            return None
        mean = statistics.fmean(recent)
        if self.rising(mean <= self.cfg.floor):
            return self.alarm(step, self.metric, mean, self.cfg.floor, onset=step - self.cfg.span + 1, above=False)
        return None


@MONITORS.register("success_drop")
class SuccessDrop(Monitor):
    """Training success (env/success_once of the step's episodes) averaged over a window, below a
    fraction of the best window so far: a policy that was learning and now gets worse."""

    kind, metric = "success_drop", "env/success_once"

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        if self.metric not in metrics:
            return None
        window: list[float] = self.state.setdefault("window", [])
        window.append(float(metrics[self.metric]))
        del window[:-self.cfg.window]
        if len(window) < self.cfg.window:
            return None
        mean, best = statistics.fmean(window), self.state.get("best", 0.0)
        self.state["best"] = max(best, mean)
        if self.rising(best >= self.cfg.min_best and mean < self.cfg.fraction * best):
            return self.alarm(step, f"{self.metric} (mean of {self.cfg.window} steps)", mean, self.cfg.fraction * best,
                              onset=step - self.cfg.window + 1, above=False)
        return None


DEAD_START_HINT = ("no episode has earned reward or succeeded yet; what usually helps: start from an SFT policy "
                   "(`embodied-rl demos`, `embodied-rl sft`, then actor.model.model_path), a dense reward "
                   "(e.g. ManiSkill's env.train.init_params.reward_mode=normalized_dense), or a longer horizon "
                   "(env.train.max_episode_steps)")


@MONITORS.register("dead_start")
class DeadStart(Monitor):
    """The first `steps` training steps earned no reward and no success: nothing for the policy
    gradient to follow. Fires once."""

    kind = "dead_start"

    def observe(self, step: int, metrics: Metrics) -> Alarm | None:
        if self.state.get("done") or "env/success_once" not in metrics:
            return None
        if not earned_nothing(metrics):
            self.state["done"] = True  # the start is alive; never checked again
            return None
        quiet = self.state["quiet"] = self.state.get("quiet", 0) + 1
        if quiet < self.cfg.steps:
            return None
        self.state["done"] = True
        return self.alarm(step, "env/return", 0.0, 0.0, onset=step - quiet + 1, above=False, hint=DEAD_START_HINT,
                          detail=f"no reward and no success in the first {quiet} training steps")
