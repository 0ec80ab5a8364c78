"""Probes of tests/test_schema_walk.py for what a run writes about itself: the run directory and
console of MetricsLogger (runner.logger) and the runner's health handling over a fixed stream
(runner.health, runner.save_best). Not a test module."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from embodied_rl.config.loader import to_dict
from embodied_rl.config.schema import RootConfig
from tests.schema_walk_probes import quiet
from tests.wandb_support import wandb_runs


def probe_rundir(cfg: RootConfig, path: str) -> Any:
    """What MetricsLogger writes for one step (files and console), timestamps masked, and the
    project and run name of its wandb run (offline: tests/conftest.py sets WANDB_MODE)."""
    import re

    from embodied_rl.runtime.metrics_logger import MetricsLogger

    # The probe runs in its own directory, emptied before and after, so that the relative
    # log paths of the configs land inside it.
    root = Path.cwd() / "rundir"
    root.mkdir(exist_ok=True)
    _empty(root)
    here = Path.cwd()
    os.chdir(root)
    try:
        with quiet() as out, MetricsLogger(cfg.runner.logger, cfg.runner.logger.log_path, total_steps=cfg.runner.max_steps,
                                           config=to_dict(cfg), stream=None) as logger:
            logger.log(1, {"env/success_once": 0.5, "train/actor/total_loss": 1.0})
        # wandb's own files vary from run to run (written by its service process): observed
        # as its directory here, and through its run record below.
        names = sorted({re.sub(r"\d{6,}.*|(?<=wandb)/.*", "<t>", str(p.relative_to(root)))
                        for p in root.rglob("*") if p.is_file()})
        jsonl = [p.read_text() for p in root.rglob("metrics.jsonl")]
        console = re.sub(r"\d+(\.\d+)?\s*(s|it/s|ms)\b|\d\d:\d\d(:\d\d)?", "<t>", out.getvalue())
        return names, [re.sub(r'"time": [0-9.e+-]+', "", j) for j in jsonl], console, wandb_runs(root)
    finally:
        os.chdir(here)
        _empty(root)


def _empty(root: Path) -> None:
    for p in root.iterdir():
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


def _health_stream() -> list[dict[str, float]]:
    """40 training steps that cross every health monitor's thresholds by graded amounts: a dead
    start, spikes of several sizes, a slow entropy decline, critic dips, success falling in
    stages, a NaN loss and a skipped gradient; `eval` is what an evaluation after the step scores."""
    success = [0.0] * 6 + [0.15] * 5 + [0.05] * 5 + [0.5] * 8 + [0.3] * 5 + [0.2] * 5 + [0.08] * 6
    kl = {12: 0.6, 18: 1.5, 24: 3.0, 30: 12.0}
    clip = {12: 0.1, 18: 0.35, 24: 0.8}
    grad = {14: 3.0, 20: 8.0, 26: 15.0, 32: 40.0}
    ev = {**dict.fromkeys(range(7, 11), -0.2), **dict.fromkeys(range(20, 24), 0.05), **dict.fromkeys(range(24, 27), -0.05), **dict.fromkeys(range(33, 36), -0.3)}
    steps = []
    for i in range(1, 41):
        warm = i <= 2
        steps.append({"train/critic/warmup": float(warm), "train/actor/approx_kl": 0.0 if warm else kl.get(i, 0.1),
                      "train/actor/clip_fraction": 0.0 if warm else clip.get(i, 0.02),
                      "train/actor/grad_norm": 9.0 if warm else grad.get(i, 0.5),
                      "train/actor/entropy": 0.3 * 0.8 ** max(0, i - 14), "train/critic/explained_variance": ev.get(i, 0.5),
                      "train/actor/total_loss": float("nan") if i == 36 else 1.0,
                      "train/actor/nonfinite_grad_steps": float(i == 38),
                      "env/success_once": success[i - 1], "env/return": 10.0 * (i > 6), "eval": success[i - 1] + 0.01 * (i % 3)})
    return steps


def probe_health(cfg: RootConfig, path: str) -> Any:
    """The runner's per-step health handling (runtime/health_keeper.py) over a fixed stream, in a
    run directory of real checkpoints written when the runner would write them (the start when a
    rollback is possible, runner.save_interval): every alarm, every verdict (go on, roll back
    to which step with which learning-rate scale, stop and why) and every new best evaluation
    (runner.save_best). The stream goes on after a stop, to observe the later decisions too."""
    from embodied_rl.config.plan import evaluates_after, saves_after
    from embodied_rl.runtime import checkpoint as ckpt
    from embodied_rl.runtime.health_keeper import (
        HEALTH_FILE,
        HealthKeeper,
        set_aside_after,
    )

    root = Path.cwd() / "health_run"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()

    def save(step: int) -> None:
        with ckpt.checkpoint_writer(root, step) as tmp:
            ckpt.write_runner_state(tmp, global_step=step, weight_version=step, config_yaml="{}\n")

    keeper = HealthKeeper(cfg.runner, root)
    if keeper.may_roll_back:
        save(0)
    events: list[Any] = []
    for step, metrics in enumerate(_health_stream(), start=1):
        alarms = keeper.check(step, {k: v for k, v in metrics.items() if k != "eval"})
        if saves_after(cfg, step):
            save(step)
        if evaluates_after(cfg, step):
            events.append(("best", step, keeper.new_best(step, metrics["eval"])))
        verdict = keeper.verdict(alarms)
        if verdict.rollback_to is not None:
            target = ckpt.load_runner_state(verdict.rollback_to, restore_rng=False).global_step
            keeper.rolled_back(step, target)
            set_aside_after(root, target, keeper.rollbacks)
            events.append(("rollback", step, target, keeper.lr_scale))
        elif verdict.stop is not None:
            events.append(("stop", step, verdict.stop))
    records = (root / HEALTH_FILE).read_text().splitlines() if (root / HEALTH_FILE).is_file() else []
    shutil.rmtree(root, ignore_errors=True)
    return events, [r.replace("NaN", "nan") for r in records]
