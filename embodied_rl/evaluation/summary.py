"""The console lines that state an evaluation's held-out success (a run's result at a glance),
and the record of a training run's first and last evaluation (`eval_change.json`)."""
from __future__ import annotations

import math
from typing import Any

from embodied_rl.evaluation.compare import METRIC, PairedResult
from embodied_rl.evaluation.intervals import format_rate, wilson_interval

EVAL_CHANGE_FILE = "eval_change.json"


def _counts(metrics: dict[str, float], prefix: str, task: str = "") -> tuple[int, int] | None:
    """(successes, episodes) of success_once under `prefix` (of one task); None when not measured."""
    suffix = f"/{task}" if task else ""
    rate, n = metrics.get(f"{prefix}/{METRIC}{suffix}", math.nan), int(metrics.get(f"{prefix}/num_trajectories{suffix}", 0))
    return (round(rate * n), n) if math.isfinite(rate) else None


def _rate(metrics: dict[str, float], prefix: str, task: str = "") -> tuple[float, str]:
    """(success_once, its formatted rate with Wilson interval and counts) under `prefix` (of one task)."""
    counts = _counts(metrics, prefix, task)
    suffix = f"/{task}" if task else ""
    return metrics.get(f"{prefix}/{METRIC}{suffix}", math.nan), format_rate(*counts) if counts else format_rate(0, 0)


def paired_counts(r: PairedResult) -> str:
    """'paired: 12 only after, 2 only before, 14 both, exact McNemar p = 0.0129' (A = before, B = after)."""
    return f"paired: {r.only_b} only after, {r.only_a} only before, {r.both} both, exact McNemar p = {r.p_value:.3g}"


def eval_change(first: tuple[int, dict[str, float]], last: tuple[int, dict[str, float]], scorings: list[str],
                paired: dict[str, PairedResult] | None = None) -> str:
    """One line per scoring comparing two evaluations' held-out success (the run's result at a
    glance), then for a mixture one line per task; `paired`: per scoring, the two evaluations'
    episodes paired by initial state (evaluation/compare.py, A = first, B = last), when both
    started from the same states."""
    (s0, m0), (s1, m1) = first, last
    lines = []
    for scoring in scorings:
        prefix = f"eval/{scoring}"
        for task in ["", *mixture_tasks(m0, prefix)]:
            (a, ra), (b, rb) = _rate(m0, prefix, task), _rate(m1, prefix, task)
            head = f"eval success, {scoring} (95 % Wilson interval): " if not task else f"  {task}: "
            line = f"{head}{ra} at step {s0} -> {rb} at step {s1}: {100 * (b - a):+.1f} points"
            r = _paired_of(paired, scoring, task)
            lines.append(f"{line}; {paired_counts(r)}" if r else line)
    return "\n".join(lines)


def _paired_of(paired: dict[str, PairedResult] | None, scoring: str, task: str) -> PairedResult | None:
    """The scoring's paired counts, or one task's of them."""
    r = paired[scoring] if paired else None
    return r.tasks.get(task) if r is not None and task else r


def change_record(first: tuple[int, dict[str, float]], last: tuple[int, dict[str, float]], scorings: list[str],
                  paired: dict[str, PairedResult] | None = None) -> dict[str, Any]:
    """The content of eval_change.json: per scoring, the success of the first and last evaluation
    with 95 % Wilson intervals and, when paired, the discordant pairs and the exact McNemar p; for
    a mixture, the same per task under "tasks"."""

    def side(step: int, metrics: dict[str, float], scoring: str, task: str) -> dict[str, Any]:
        counts = _counts(metrics, f"eval/{scoring}", task)
        if counts is None:
            return {"step": step, "successes": None, "episodes": 0, "rate": None, "ci95_low": None, "ci95_high": None}
        k, n = counts
        low, high = wilson_interval(k, n)
        return {"step": step, "successes": k, "episodes": n, "rate": k / n if n else None, "ci95_low": low, "ci95_high": high}

    def result(scoring: str, task: str = "") -> dict[str, Any]:
        before, after = side(*first, scoring, task), side(*last, scoring, task)
        r = _paired_of(paired, scoring, task)
        return {
            "before": before, "after": after,
            "difference": None if before["rate"] is None or after["rate"] is None else after["rate"] - before["rate"],
            "paired": None if r is None else {"n": r.n, "only_before": r.only_a, "only_after": r.only_b,
                                              "both": r.both, "mcnemar_p": r.p_value},
        }

    results = {}
    for scoring in scorings:
        results[scoring] = result(scoring)
        if tasks := mixture_tasks(first[1], f"eval/{scoring}"):
            results[scoring]["tasks"] = {task: result(scoring, task) for task in tasks}
    return {"metric": METRIC,
            "paired_by": "reset id: the same (eval epoch, sub-env, episode) under env.eval.use_fixed_reset_state_ids" if paired else None,
            "scorings": list(scorings), "results": results}


def tasks_of(metrics: dict[str, float], prefix: str) -> list[str]:
    """The tasks whose episodes `prefix`'s metrics break down (`<prefix>/num_trajectories/<task>`)."""
    head = f"{prefix}/num_trajectories/"
    return sorted(k.removeprefix(head) for k in metrics if k.startswith(head))


def mixture_tasks(metrics: dict[str, float], prefix: str) -> list[str]:
    """tasks_of where there are several (a mixture); [] for one task, whose line is the total's."""
    tasks = tasks_of(metrics, prefix)
    return tasks if len(tasks) > 1 else []


def task_mean(metrics: dict[str, float], prefix: str) -> float | None:
    """The unweighted mean of the per-task success rates under `prefix` (a mixture's score, each
    task counting once whatever its share); None with fewer than two tasks."""
    rates = [metrics.get(f"{prefix}/{METRIC}/{t}", math.nan) for t in mixture_tasks(metrics, prefix)]
    return sum(rates) / len(rates) if rates and all(math.isfinite(r) for r in rates) else None


def eval_summary(metrics: dict[str, float], scorings: list[str]) -> str:
    """Every scoring's held-out success with its interval (an evaluation at a glance); with several
    tasks, then one line per task and their unweighted mean."""
    line = "eval success (95 % Wilson interval): " + "; ".join(f"{s} {_rate(metrics, f'eval/{s}')[1]}" for s in scorings)
    tasks = mixture_tasks(metrics, f"eval/{scorings[0]}")
    if not tasks:
        return line
    rows = [f"  {t}: " + "; ".join(f"{s} {_rate(metrics, f'eval/{s}', t)[1]}" for s in scorings) for t in tasks]
    mean = "; ".join(f"{s} {100 * m:.1f} %" for s in scorings if (m := task_mean(metrics, f"eval/{s}")) is not None)
    return "\n".join([line, *rows, f"  mean over {len(tasks)} tasks: {mean}"])
