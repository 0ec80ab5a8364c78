"""Training metrics to metrics.jsonl and the sinks of `runner.logger.logger_backends`
(embodied_rl/sinks: console, tensorboard, wandb, or a plug-in's), plus a progress bar.

`metrics.jsonl` (one JSON object per step with "step" and "time"; non-finite values are
written as null so every line is strict JSON) is always written: `embodied-rl review`
reads it. Metric names must start with one of METRIC_PREFIXES so dashboards and the review page
agree on them. On resume from step k, lines after k (logged by the interrupted run after
its last checkpoint) are dropped from metrics.jsonl, and each sink is told to rewind.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from embodied_rl.sinks import METRIC_SINKS, MetricSink, SinkContext

METRIC_PREFIXES = ("env/", "eval/", "rollout/", "train/actor/", "train/critic/", "train/sft/", "time/", "channel/", "driver/", "recovery/", "health/")
METRICS_FILE = "metrics.jsonl"
#: Shown on the progress bar, first one present wins.
SUCCESS_KEYS = ("env/success_once", "env/success_at_end", "eval/success_once")


def _scalar(name: str, value: Any) -> float | None:
    try:
        v = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        raise ValueError(f"metric {name!r} has a non-numeric value {value!r}") from None
    return v if math.isfinite(v) else None


class MetricsLogger:
    """`log(step, metrics)` once per training step; `close()` (or use as a context manager)."""

    def __init__(self, logger_cfg, run_dir: str | Path, *, total_steps: int, start_step: int = 0,
                 config: dict | None = None, stream: TextIO | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps, self.start_step = total_steps, start_step
        self.stream = stream or sys.stdout
        self._jsonl = self._open_jsonl(start_step)
        self._bar = self._make_bar()
        ctx = SinkContext(logger_cfg=logger_cfg, run_dir=self.run_dir, start_step=start_step,
                          total_steps=total_steps, config=config, write=self._write)
        self.sinks: list[MetricSink] = []
        try:
            for name in logger_cfg.logger_backends:
                self.sinks.append(METRIC_SINKS.get(name)(ctx))
        except BaseException:
            self.close()
            raise
        self._t0 = time.monotonic()
        self._success: float | None = None
        self._logged = 0  # log() calls so far

    def _open_jsonl(self, start_step: int) -> TextIO:
        path = self.run_dir / METRICS_FILE
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if _step_of(line) is not None and _step_of(line) <= start_step]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, path)
        return open(path, "a", buffering=1)

    def _make_bar(self):
        if not (hasattr(self.stream, "isatty") and self.stream.isatty()):
            return None
        from tqdm import tqdm

        return tqdm(total=self.total_steps, initial=self.start_step, desc="train", unit="step", file=self.stream, dynamic_ncols=True)

    # ---- logging -----------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any], *, counts: bool = True) -> None:
        """Write one row; counts=False for a row that is not a step of the run's progress
        (the evaluation before training)."""
        bad = [k for k in metrics if not k.startswith(METRIC_PREFIXES)]
        if bad:
            raise ValueError(f"metric names {bad} lack a known prefix; use one of {', '.join(METRIC_PREFIXES)}")
        values = {k: _scalar(k, v) for k, v in sorted(metrics.items())}
        self._jsonl.write(json.dumps({"step": step, "time": time.time(), **values}) + "\n")
        for sink in self.sinks:
            sink.log(step, values)
        self._success = next((values[k] for k in SUCCESS_KEYS if values.get(k) is not None), self._success)
        if counts:
            self._progress(step)

    def rewind(self, step: int) -> None:
        """Drop what was logged after `step` (the run went back to that checkpoint and repeats
        the steps after it), in metrics.jsonl and in each sink that can."""
        self._jsonl.close()
        self._jsonl = self._open_jsonl(step)
        for sink in self.sinks:
            sink.rewind(step)
        self._logged = max(0, step - self.start_step)

    def note(self, text: str) -> None:
        """A line for the reader of the console (e.g. the run's result), whatever the sinks."""
        self._write(text)

    def _progress(self, step: int) -> None:
        # Progress counts log() calls, not step numbers: an eval-only run logs its one result
        # at global step 0 with total_steps=1.
        self._logged += 1
        completed = min(self.total_steps, self.start_step + self._logged)
        elapsed = time.monotonic() - self._t0
        per_step = elapsed / self._logged
        success = "n/a" if self._success is None else f"{self._success:.3f}"
        finished = completed >= self.total_steps
        if self._bar is not None:
            self._bar.n = completed
            self._bar.set_postfix_str(f"{'done, ' if finished else ''}success {success}", refresh=True)
        elif finished:
            rate = f" ({per_step:.1f}s/step)" if self._logged > 1 else ""
            self._write(f"[done {completed}/{self.total_steps}] in {_hms(elapsed)}{rate}, success {success}")
        else:
            eta = per_step * (self.total_steps - completed)
            self._write(f"[step {step}/{self.total_steps}] {per_step:.1f}s/step, ETA {_hms(eta)}, success {success}")

    def _write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        while self.sinks:
            self.sinks.pop().close()
        if not self._jsonl.closed:
            self._jsonl.close()

    def __enter__(self) -> MetricsLogger:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def logged_steps(path: str | Path) -> list[int]:
    """The steps a metrics.jsonl holds (none for a missing file)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [s for s in map(_step_of, path.read_text().splitlines()) if s is not None]


def _step_of(line: str) -> int | None:
    """Step of a metrics.jsonl line; None for a blank or torn line (a crash mid-write)."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def _hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
