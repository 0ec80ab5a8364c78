"""What a training run does with its health alarms (runner.health), and its best checkpoint.

Per step the keeper runs the HealthWatch on the step's metrics, adds health/ metrics, writes each
alarm and rollback to `health.jsonl` in the run directory (the review page reads it) and decides
the step's verdict from the most severe action: go on, stop, or roll back to the newest
checkpoint from before the failure's onset with the learning rates lowered.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rl.config.schema.runtime import RunnerConfig
from embodied_rl.health import Alarm, HealthWatch
from embodied_rl.health.watch import metrics_of
from embodied_rl.runtime import checkpoint as ckpt

log = logging.getLogger(__name__)

HEALTH_FILE = "health.jsonl"
BEST = "best"
BEST_RECORD = "best.json"


class HealthStop(Exception):
    """The run ends because of an alarm (its line is the message); the runner saves first."""


@dataclass
class Verdict:
    stop: str | None = None            # the one-line reason to stop
    rollback_to: Path | None = None    # the checkpoint to continue from


class HealthKeeper:
    """runner.health's monitors and actions, and runner.save_best's record of the best evaluation."""

    def __init__(self, cfg: RunnerConfig, run_dir: Path) -> None:
        self.cfg, self.save_best, self.run_dir = cfg.health, cfg.save_best, run_dir
        self.watch = HealthWatch(cfg.health)
        self.rollbacks = 0
        self.lr_scale = 1.0  # the product of the rollbacks' factors; carried by checkpoints
        self.best: float | None = None  # the best evaluation's success so far (runner.save_best)

    @property
    def may_roll_back(self) -> bool:
        return any(m.cfg.action == "rollback" for m in self.watch.monitors)

    # ---------------------------------------------------------------- per step
    def check(self, step: int, metrics: dict[str, float]) -> list[Alarm]:
        """Observe one step; its health/ metrics are added to `metrics`."""
        alarms = self.watch.observe(step, metrics)
        metrics.update(metrics_of(alarms))
        for alarm in alarms:
            self._record(alarm.record())
        return alarms

    def verdict(self, alarms: list[Alarm]) -> Verdict:
        if not alarms or alarms[0].action == "warn":
            return Verdict()
        worst = alarms[0]  # sorted most severe first
        if worst.action == "stop":
            return Verdict(stop=worst.line())
        if self.rollbacks >= self.cfg.max_rollbacks:
            return Verdict(stop=f"{worst.line()}; no rollback left (runner.health.max_rollbacks={self.cfg.max_rollbacks})")
        target = checkpoint_before(self.run_dir, worst.onset)
        if target is None:
            return Verdict(stop=f"{worst.line()}; no checkpoint from before step {worst.onset} to roll back to "
                                "(a smaller runner.save_interval keeps more)")
        return Verdict(rollback_to=target)

    def rolled_back(self, from_step: int, to_step: int) -> None:
        self.rollbacks += 1
        self.lr_scale *= self.cfg.rollback_lr_factor
        self._record({"event": "rollback", "from_step": from_step, "to_step": to_step, "rollback": self.rollbacks,
                      "lr_scale": self.lr_scale})

    def stopped(self, step: int, reason: str) -> None:
        self._record({"event": "stop", "step": step, "reason": reason})

    def offer_best(self, run_dir: Path, step: int, success: float, checkpoint: Callable[[], Path]) -> None:
        """An evaluation that beats every earlier one (the one before training included) makes its
        step's checkpoint (`checkpoint()`, saving it if need be) checkpoints/best."""
        if self.new_best(step, success):
            best = keep_best(run_dir, checkpoint(), {"global_step": step, "eval/success_once": success})
            log.info("best evaluation so far (success %.3f at step %d): %s", success, step, best)

    def new_best(self, step: int, success: float) -> bool:
        """runner.save_best: whether an evaluation beats every earlier one (its checkpoint then
        becomes checkpoints/best)."""
        if not self.save_best or (self.best is not None and success <= self.best):
            return False
        self.best = success
        self._record({"event": "best", "step": step, "eval/success_once": success})
        return True

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"watch": self.watch.state_dict(), "lr_scale": self.lr_scale, "rollbacks": self.rollbacks, "best": self.best}

    def load_state_dict(self, state: dict[str, Any], *, rollback: bool = False) -> None:
        """The monitors continue from the checkpoint's state. A resume also takes its lr scale,
        rollback count and best evaluation; a rollback keeps the run's own (already lowered,
        counted; and the best of every evaluation so far, checkpoints/best: a checkpoint saved
        before its step's evaluation does not know that evaluation)."""
        self.watch.load_state_dict(state.get("watch", {}))
        if not rollback:
            self.best = state.get("best")
            self.lr_scale = float(state.get("lr_scale", 1.0))
            self.rollbacks = int(state.get("rollbacks", 0))

    def _record(self, entry: dict[str, Any]) -> None:
        with open(self.run_dir / HEALTH_FILE, "a") as f:
            f.write(json.dumps(entry) + "\n")


def checkpoint_before(run_dir: Path, onset: int) -> Path | None:
    """The newest complete checkpoint of a step before `onset`."""
    root = Path(run_dir) / ckpt.CKPT_DIR
    done = [p for p in root.glob("global_step_*") if (p / ckpt.META).is_file()] if root.is_dir() else []
    before = [p for p in done if json.loads((p / ckpt.META).read_text())["global_step"] < onset]
    return max(before, key=lambda p: p.name) if before else None


def keep_best(run_dir: Path, step_dir: Path, record: dict[str, Any]) -> Path:
    """checkpoints/best becomes a copy of `step_dir` (hard links: no second copy of the weights,
    and a later re-save of that step, after a rollback, leaves it alone), with best.json."""
    root = Path(run_dir) / ckpt.CKPT_DIR
    tmp, old = root / f".tmp-{BEST}-{os.getpid()}", root / f".tmp-old-{BEST}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(step_dir, tmp, copy_function=os.link)
    (tmp / BEST_RECORD).write_text(json.dumps({**record, "checkpoint": step_dir.name}) + "\n")
    best = root / BEST
    if best.exists():
        best.rename(old)
    tmp.rename(best)
    shutil.rmtree(old, ignore_errors=True)
    return best


def set_aside_after(run_dir: Path, step: int, rollback: int) -> None:
    """Move the checkpoints of steps after `step` to checkpoints/rolled_back_<rollback>/ (kept
    for a post-mortem) and point `latest` at `step`'s: the run continues from there."""
    root = Path(run_dir) / ckpt.CKPT_DIR
    aside = root / f"rolled_back_{rollback}"
    for path in sorted(root.glob("global_step_*")):
        if (path / ckpt.META).is_file() and json.loads((path / ckpt.META).read_text())["global_step"] > step:
            aside.mkdir(exist_ok=True)
            path.rename(aside / path.name)
    pointer = root / f".{ckpt.LATEST}.tmp"
    pointer.write_text(ckpt.step_dir_name(step) + "\n")
    os.replace(pointer, root / ckpt.LATEST)
