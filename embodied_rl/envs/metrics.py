"""Episode metrics: per-episode summaries -> means, overall and per task, and their merge.

Keys: `success_once`, `success_at_end`, `return`, `episode_len`, `fail_rate` and
`num_trajectories`, plus the same with a `/<task_id>` suffix per task. A mean `m/<task>` is
weighted by `num_trajectories/<task>` when merging parts (stages, env workers).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from embodied_rl.types import EpisodeSummary

COUNT = "num_trajectories"
_FIELDS = {
    "success_once": lambda e: e.success_once,
    "success_at_end": lambda e: e.success_at_end,
    "return": lambda e: e.episode_return,
    "episode_len": lambda e: e.episode_len,
    "fail_rate": lambda e: e.failed,
}


def _means(eps: Sequence[EpisodeSummary], suffix: str) -> dict[str, float]:
    out = {f"{name}{suffix}": float(np.mean([get(e) for e in eps])) for name, get in _FIELDS.items()}
    out[f"{COUNT}{suffix}"] = float(len(eps))
    return out


def episode_metrics(episodes: Iterable[EpisodeSummary]) -> dict[str, float]:
    eps = list(episodes)
    if not eps:
        return {COUNT: 0.0}
    by_task: dict[str, list[EpisodeSummary]] = defaultdict(list)
    for e in eps:
        by_task[e.task_id].append(e)
    out = _means(eps, "")
    for task, task_eps in sorted(by_task.items()):
        out.update(_means(task_eps, f"/{task}"))
    return out


def _weight_key(key: str, prefix: str) -> str:
    task = key[len(prefix):].partition("/")[2]
    return f"{prefix}{COUNT}/{task}" if task else f"{prefix}{COUNT}"


def merge_metrics(parts: Sequence[dict[str, float]], prefix: str = "") -> dict[str, float]:
    """Episode-weighted means of `prefix`-ed episode metrics over parts; counts are summed."""
    out: dict[str, float] = {}
    keys = {k for p in parts for k in p if k.startswith(prefix)}
    for key in keys:
        if key[len(prefix):].split("/", 1)[0] == COUNT:
            out[key] = float(sum(p.get(key, 0.0) for p in parts))
            continue
        wkey = _weight_key(key, prefix)
        pairs = [(p[key], p.get(wkey, 0.0)) for p in parts if key in p]
        total = sum(w for _, w in pairs)
        if total > 0:
            out[key] = float(sum(v * w for v, w in pairs) / total)
    return out
