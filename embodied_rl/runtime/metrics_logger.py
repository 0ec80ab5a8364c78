"""Training metrics to metrics.jsonl, the console, TensorBoard and wandb, plus a progress bar.

`metrics.jsonl` (one JSON object per step with "step" and "time"; non-finite values are
written as null so every line is strict JSON) is always written: `embodied-rl review`
reads it. `runner.logger.logger_backends` adds sinks:

    console      a grouped table per step (every evaluation and the last step; others at most
                 every CONSOLE_TABLE_S seconds)
    tensorboard  SummaryWriter in <run_dir>/tensorboard
    wandb        <run_dir>/wandb; offline unless WANDB_MODE is set, or an API key is
                 configured (WANDB_API_KEY or a netrc login for the wandb host): it never prompts

Metric names must start with one of METRIC_PREFIXES so dashboards and the review page
agree on them. On resume from step k, lines after k (logged by the interrupted run after
its last checkpoint) are dropped from metrics.jsonl and TensorBoard purges them too.
"""
from __future__ import annotations

import json
import math
import netrc
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from embodied_rl.errors import ConfigError

METRIC_PREFIXES = ("env/", "eval/", "rollout/", "train/actor/", "train/critic/", "train/sft/", "time/", "channel/", "driver/", "recovery/", "health/")
BACKENDS = ("console", "tensorboard", "wandb")
CONSOLE_TABLE_S = 10.0
METRICS_FILE = "metrics.jsonl"
#: Shown on the progress bar, first one present wins.
SUCCESS_KEYS = ("env/success_once", "env/success_at_end", "eval/success_once")


def wandb_mode(environ: dict[str, str] | None = None) -> str:
    """'online' only when credentials exist; otherwise 'offline' (an explicit WANDB_MODE wins)."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_MODE"):
        return env["WANDB_MODE"]
    if env.get("WANDB_API_KEY"):
        return "online"
    host = urlparse(env.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        if netrc.netrc(env.get("NETRC") or None).authenticators(host):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return "offline"


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
        unknown = [b for b in logger_cfg.logger_backends if b not in BACKENDS]
        if unknown:
            raise ConfigError(f"runner.logger.logger_backends: unknown {unknown}; choose from {', '.join(BACKENDS)}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.backends = list(logger_cfg.logger_backends)
        self.total_steps, self.start_step = total_steps, start_step
        self.stream = stream or sys.stdout
        self._jsonl = self._open_jsonl(start_step)
        self._tb = self._wandb = None
        if "tensorboard" in self.backends:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=start_step + 1 if start_step else None)
        if "wandb" in self.backends:
            self._wandb = self._init_wandb(logger_cfg, config)
        self._bar = self._make_bar()
        self._t0 = time.monotonic()
        self._success: float | None = None
        self._logged = 0  # log() calls so far
        self._last_table = -math.inf

    # ---- sinks -------------------------------------------------------------------------
    def _open_jsonl(self, start_step: int) -> TextIO:
        path = self.run_dir / METRICS_FILE
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if _step_of(line) is not None and _step_of(line) <= start_step]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, path)
        return open(path, "a", buffering=1)

    def _init_wandb(self, logger_cfg, config: dict | None):
        import wandb

        mode = wandb_mode()
        id_file = self.run_dir / "wandb_run_id.txt"  # one wandb run per run dir, continued on resume
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        # Absolute: wandb's service process may have been started from another working directory
        # (an earlier run in the same process) and resolves a relative dir against its own.
        return wandb.init(project=logger_cfg.project_name, name=logger_cfg.experiment_name, id=run_id, resume="allow",
                          dir=str(self.run_dir.resolve()), config=config, mode=mode,
                          settings=wandb.Settings(console="off", silent=True))

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
        finite = {k: v for k, v in values.items() if v is not None}
        if self._tb is not None:
            for k, v in finite.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(finite, step=step)
        self._success = next((values[k] for k in SUCCESS_KEYS if values.get(k) is not None), self._success)
        if "console" in self.backends and self._table_due(step, values):
            self._write(self.format_table(step, values))
            self._last_table = time.monotonic()
        if counts:
            self._progress(step)

    def rewind(self, step: int) -> None:
        """Drop what was logged after `step` (the run went back to that checkpoint and repeats
        the steps after it); wandb cannot drop logged steps and keeps the first values."""
        self._jsonl.close()
        self._jsonl = self._open_jsonl(step)
        if self._tb is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb.close()
            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=step + 1)
        self._logged = max(0, step - self.start_step)

    def note(self, text: str) -> None:
        """A line for the reader of the console (e.g. the run's result), whatever the sinks."""
        self._write(text)

    def _table_due(self, step: int, values: dict[str, float | None]) -> bool:
        """The console shows every evaluation and the last step, other steps at most every
        CONSOLE_TABLE_S seconds (SFT runs hundreds of sub-second steps; RL steps take longer)."""
        return (any(k.startswith("eval/") for k in values) or step >= self.total_steps
                or time.monotonic() - self._last_table >= CONSOLE_TABLE_S)

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

    @staticmethod
    def format_table(step: int, values: dict[str, float | None]) -> str:
        width = max([len(k) for k in values] + [6])
        total = width + 17  # "| " + name + " " + 12-wide value + " |"
        lines = [f"+-- step {step} ".ljust(total - 1, "-") + "+"]
        for k, v in values.items():
            lines.append(f"| {k:<{width}} {'nan' if v is None else f'{v:.4g}':>12} |")
        lines.append("+" + "-" * (total - 2) + "+")
        return "\n".join(lines)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
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
