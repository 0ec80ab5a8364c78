"""The console lines that state an evaluation's held-out success (a run's result at a glance)."""
from __future__ import annotations

import math

from embodied_rl.evaluation.intervals import format_rate


def _rate(metrics: dict[str, float], prefix: str) -> tuple[float, str]:
    """(success_once, its formatted rate with Wilson interval and counts) under `prefix`."""
    rate, n = metrics.get(f"{prefix}/success_once", math.nan), int(metrics.get(f"{prefix}/num_trajectories", 0))
    return rate, format_rate(round(rate * n), n) if math.isfinite(rate) else format_rate(0, 0)


def eval_change(first: tuple[int, dict[str, float]], last: tuple[int, dict[str, float]], scorings: list[str]) -> str:
    """One line per scoring comparing two evaluations' held-out success (the run's result at a glance)."""
    (s0, m0), (s1, m1) = first, last
    lines = []
    for scoring in scorings:
        (a, ra), (b, rb) = _rate(m0, f"eval/{scoring}"), _rate(m1, f"eval/{scoring}")
        lines.append(f"eval success, {scoring} (95 % Wilson interval): {ra} at step {s0} -> {rb} at step {s1}: "
                     f"{100 * (b - a):+.1f} points")
    return "\n".join(lines)


def eval_summary(metrics: dict[str, float], scorings: list[str]) -> str:
    """One line: every scoring's held-out success with its interval (an evaluation at a glance)."""
    return "eval success (95 % Wilson interval): " + "; ".join(f"{s} {_rate(metrics, f'eval/{s}')[1]}" for s in scorings)
