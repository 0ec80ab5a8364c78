"""Read a run's `metrics.jsonl` (one JSON object per logged step) into per-key curves.

The runtime appends to this file while training runs, so a truncated last line is normal
and only produces a warning. TensorBoard event files are never parsed here.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_LINE_WARNINGS = 5


@dataclass
class Curves:
    """series: metric key -> [[step, value], ...] sorted by step; one point per step (last wins)."""

    series: dict[str, list[list[float]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_metrics(path: Path) -> Curves:
    """Parse `path`; a missing file gives empty curves, bad lines are skipped with a warning."""
    curves = Curves()
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return curves
    except OSError as exc:
        curves.warnings.append(f"{path.name} unreadable ({exc.__class__.__name__})")
        return curves
    points: dict[str, dict[float, float]] = {}
    add_lines(lines, path.name, lambda line: _add_line(line, points), curves.warnings)
    curves.series = {k: [[s, v] for s, v in sorted(pts.items())] for k, pts in sorted(points.items())}
    return curves


def add_lines(lines: list[str], name: str, add: Callable[[str], str | None], warnings: list[str]) -> None:
    """Feed each non-empty line of file `name` to `add`; a line it rejects (it returns the problem)
    is skipped with a warning, the first MAX_LINE_WARNINGS by line number, the rest counted."""
    bad = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        problem = add(line)
        if problem:
            bad += 1
            if bad <= MAX_LINE_WARNINGS:
                warnings.append(f"{name} line {lineno}: {problem} (skipped)")
    if bad > MAX_LINE_WARNINGS:
        warnings.append(f"{name}: {bad - MAX_LINE_WARNINGS} more bad lines skipped")


def json_object(line: str) -> dict | str:
    """One JSON-lines record as a dict, or what is wrong with it."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return "invalid JSON"
    return row if isinstance(row, dict) else "not a JSON object"


def _add_line(line: str, points: dict[str, dict[float, float]]) -> str | None:
    """Merge one line's numeric values into `points`; return a problem description or None."""
    row = json_object(line)
    if isinstance(row, str):
        return row
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
        return "no numeric 'step'"
    for key, value in row.items():
        # Non-finite values (NaN loss) cannot be plotted or JSON-encoded; leave a gap.
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            points.setdefault(key, {})[step] = float(value)
    return None
