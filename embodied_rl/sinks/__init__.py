"""Metric sinks keyed by `runner.logger.logger_backends`: where a run's per-step metrics go
besides `metrics.jsonl` (always written: the review page reads it).

A sink is a class built as `cls(context)` that takes each step's values with `log`, drops
what came after a step with `rewind` (a run that went back to a checkpoint), and releases what
it holds with `close`. Adding one is a module with a class registered in `METRIC_SINKS`
(a plug-in's module can do the same, embodied_rl/plugins.py). Sinks import their libraries
when built, so naming them in a config costs nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from embodied_rl.registry import Registry


@dataclass(frozen=True)
class SinkContext:
    """What a sink is built with: the run (its directory, step range, resolved config), the
    `runner.logger` section, and `write`, which prints a line above the progress bar."""

    logger_cfg: Any
    run_dir: Path
    start_step: int
    total_steps: int
    config: dict | None
    write: Callable[[str], None]


class MetricSink(Protocol):
    def log(self, step: int, values: dict[str, float | None]) -> None:
        """One step's metrics (None: a non-finite value), names sorted."""

    def rewind(self, step: int) -> None:
        """Forget what was logged after `step`, where the sink can."""

    def close(self) -> None: ...


METRIC_SINKS: Registry[Callable[[SinkContext], MetricSink]] = Registry("runner.logger.logger_backends")

from embodied_rl.sinks import console, tensorboard, wandb  # noqa: F401  (register the built-in sinks)

__all__ = ["METRIC_SINKS", "MetricSink", "SinkContext"]
