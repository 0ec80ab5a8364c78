"""Read a run's health record (`health.jsonl`, `checkpoints/best/best.json`) into the summary the
review page shows beside the run and marks on its curves.

`health.jsonl` is written by the training runtime (one JSON object per line, event = alarm |
rollback | stop | best). Like `metrics.jsonl`, a bad line is skipped with a warning naming the
file and line; nothing here stops the page. Only files whose real path is inside the run
directory are read.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embodied_rl.review.metrics import add_lines, json_object
from embodied_rl.review.paths import is_within

HEALTH_FILE = "health.jsonl"
BEST_RECORD = "checkpoints/best/best.json"
ACTIONS = ("warn", "rollback", "stop")
# Statuses from the least to the most severe; a run's is that of its most severe event.
CLEAN, WARNED, ROLLED_BACK, STOPPED = "clean", "warned", "rolled back", "stopped"
NO_RECORD = "no health record"


@dataclass
class Health:
    """A run's health for the catalog. `reasons`: one line per alarm, rollback and stop, in the
    order they happened; `alarms`/`rollbacks` are the same events with their steps for the curves."""

    status: str = NO_RECORD
    reasons: list[str] = field(default_factory=list)
    alarms: list[dict[str, Any]] = field(default_factory=list)
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    stop: dict[str, Any] | None = None
    best: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_health(root: Path, series: dict[str, list[list[float]]], warnings: list[str]) -> Health:
    """The health of the run at `root` (a real path); `series` are its metric curves, used when
    the run has no health.jsonl. Problems are appended to `warnings`."""
    health = Health(best=_read_best(root, warnings))
    lines = _read_lines(root, HEALTH_FILE, warnings)
    if lines is None:
        health.status, health.reasons = _status_from_metrics(series)
        return health
    health.status = CLEAN
    add_lines(lines, HEALTH_FILE, lambda line: _add_event(line, health), warnings)
    return health


def _read_lines(root: Path, rel: str, warnings: list[str]) -> list[str] | None:
    """The file's lines, or None when it is missing, unreadable or leads outside the run."""
    path = root / rel
    if not path.exists():
        return None
    if not is_within(Path(os.path.realpath(path)), root) or not path.is_file():
        warnings.append(f"{rel} not read: not a regular file inside the run directory")
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        warnings.append(f"{rel} unreadable ({exc.__class__.__name__})")
        return None


def _status_from_metrics(series: dict[str, list[list[float]]]) -> tuple[str, list[str]]:
    """Without health.jsonl a run is clean only if its metrics show the monitors ran
    (health/alarms logged) and never fired; a run from before the monitors has no record."""
    counts = series.get("health/alarms")
    if not counts:
        return NO_RECORD, []
    fired = [int(step) for step, n in counts if n > 0]
    if not fired:
        return CLEAN, []
    kinds = sorted({key.removeprefix("health/") for key, pts in series.items()
                    if key.startswith("health/") and key != "health/alarms" and any(v > 0 for _, v in pts)})
    steps = ("steps " if len(fired) > 1 else "step ") + ", ".join(map(str, fired))
    line = f"metrics.jsonl counts alarms ({', '.join(kinds) or 'unnamed'}) at {steps} but {HEALTH_FILE} is missing"
    return NO_RECORD, [line]


def _add_event(line: str, health: Health) -> str | None:
    """Merge one health.jsonl line into `health`; return a problem description or None."""
    row = json_object(line)
    if isinstance(row, str):
        return row
    event = row.get("event")
    if event == "alarm":
        return _add_alarm(row, health)
    if event == "rollback":
        return _add_rollback(row, health)
    if event == "stop":
        return _add_stop(row, health)
    if event == "best":
        return None  # checkpoints/best/best.json is the record of the best checkpoint
    return f"unknown event {event!r}"


def _int(row: dict[str, Any], key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    """A finite float, else None: NaN cannot travel in the catalog's JSON (the line says 'nan')."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _fmt(value: Any) -> str:
    # The runtime's alarm line writes values with 4 significant digits; JSON keeps NaN/inf
    # (Python's json writes them), so they are shown as such.
    return f"{value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def _comparison(row: dict[str, Any], metric: str) -> str:
    sign = "<" if row.get("above") is False else ">"
    return f"{metric} = {_fmt(row.get('value'))} {sign} {_fmt(row.get('threshold'))}"


def _escalate(health: Health, status: str) -> None:
    order = (CLEAN, WARNED, ROLLED_BACK, STOPPED)
    if order.index(status) > order.index(health.status):
        health.status = status


def _add_alarm(row: dict[str, Any], health: Health) -> str | None:
    step, kind, action = _int(row, "step"), row.get("kind"), row.get("action")
    if step is None or not isinstance(kind, str) or action not in ACTIONS:
        return "alarm without an integer 'step', a 'kind' or an action (warn, rollback, stop)"
    metric = str(row.get("metric", "?"))
    # The same words as the runtime's console line (embodied_rl.health.Alarm.line), without
    # its "health: " prefix (the panel says what it is about) and its hint (a tooltip here).
    text = f"{kind} at step {step}: {row.get('detail') or _comparison(row, metric)} (action: {action})"
    health.reasons.append(text)
    health.alarms.append({"kind": kind, "step": step, "metric": metric, "value": _number(row.get("value")),
                          "threshold": _number(row.get("threshold")), "action": action,
                          "hint": str(row.get("hint") or ""), "line": text})
    _escalate(health, WARNED)
    return None


def _add_rollback(row: dict[str, Any], health: Health) -> str | None:
    start, target = _int(row, "from_step"), _int(row, "to_step")
    if start is None or target is None:
        return "rollback without integer 'from_step' and 'to_step'"
    scale = _number(row.get("lr_scale"))
    count = _int(row, "rollback")
    text = (f"rolled back from step {start} to step {target}" + (f" (rollback {count})" if count else "")
            + (f"; learning rates x{scale:g} from here" if scale is not None else ""))
    health.reasons.append(text)
    health.rollbacks.append({"from_step": start, "to_step": target, "rollback": count, "lr_scale": scale,
                             "line": text})
    _escalate(health, ROLLED_BACK)
    return None


def _add_stop(row: dict[str, Any], health: Health) -> str | None:
    step, reason = _int(row, "step"), row.get("reason")
    if step is None or not isinstance(reason, str):
        return "stop without an integer 'step' and a 'reason'"
    text = f"stopped at step {step}: {reason.removeprefix('health: ')}"
    health.reasons.append(text)
    health.stop = {"step": step, "reason": reason, "line": text}
    _escalate(health, STOPPED)
    return None


def _read_best(root: Path, warnings: list[str]) -> dict[str, Any] | None:
    """checkpoints/best/best.json: {"step", "success", "checkpoint"} or None."""
    lines = _read_lines(root, BEST_RECORD, warnings)
    if lines is None:
        return None
    try:
        record = json.loads("\n".join(lines))
    except json.JSONDecodeError:
        warnings.append(f"{BEST_RECORD}: invalid JSON (ignored)")
        return None
    step = _int(record, "global_step") if isinstance(record, dict) else None
    if step is None:
        warnings.append(f"{BEST_RECORD}: no integer 'global_step' (ignored)")
        return None
    checkpoint = record.get("checkpoint")
    return {"step": step, "success": _number(record.get("eval/success_once")),
            "checkpoint": checkpoint if isinstance(checkpoint, str) else None}
