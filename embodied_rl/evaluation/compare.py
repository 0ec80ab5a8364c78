"""Paired comparison of two policies evaluated on the same initial states (pure functions).

`embodied-rl eval CONFIG --compare A B` evaluates A, then B, with the same workers and the
same fixed reset ids (runtime/runner.py, `EmbodiedRunner.compare`); the episodes of the two
evaluations pair one to one by (eval epoch, sub-env, episode on the sub-env), which under
`env.eval.use_fixed_reset_state_ids` means the same initial state (the reset ids are checked
equal). Per scoring (greedy, sampled) the report gives each policy's success rate with its
95 % Wilson interval and the exact McNemar test of the difference on the discordant pairs; for a
mixture, the same per task as well (the pairs of that task's initial states).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from embodied_rl.evaluation.intervals import format_rate, mcnemar_exact, wilson_interval

if TYPE_CHECKING:
    from embodied_rl.types import EpisodeOutcome

COMPARISON_FILE = "comparison.json"
#: The outcome the comparison counts (the same as eval/success_once).
METRIC = "success_once"


@dataclass(frozen=True)
class PolicySource:
    """One side of a comparison, validated before anything starts (runtime/checks.py, check_compare).

    kind "model": a model directory (config.json), loaded as actor.model.model_path would be;
    kind "checkpoint": a training checkpoint's trainable weights on the config's model, as
    runner.ckpt_path loads them. resolved: the model directory or checkpoints/global_step_N."""

    label: str
    path: str
    kind: Literal["model", "checkpoint"]
    resolved: str


#: (eval epoch, episode) of one scoring's evaluation.
EvalEpisodes = list[tuple[int, "EpisodeOutcome"]]


def episode_key(epoch: int, outcome: EpisodeOutcome) -> tuple[int, int, int]:
    return epoch, outcome.sub_env, outcome.episode


def pair_episodes(a: EvalEpisodes, b: EvalEpisodes) -> list[tuple[EpisodeOutcome, EpisodeOutcome, int]]:
    """(A's episode, B's episode, eval epoch) for every episode both ran, sorted by key.

    Both evaluations must hold the same episodes from the same reset ids (what fixed reset ids
    without auto_reset guarantee); anything else is an error, never a silent partial pairing."""
    da = {episode_key(e, o): o for e, o in a}
    db = {episode_key(e, o): o for e, o in b}
    if len(da) != len(a) or len(db) != len(b):
        raise ValueError("pair_episodes: an evaluation lists the same (epoch, sub-env, episode) twice")
    if set(da) != set(db):
        only = sorted(set(da) ^ set(db))[:3]
        raise ValueError(f"pair_episodes: the two evaluations ran different episodes (e.g. (epoch, sub-env, episode) {only}); "
                         "they must use the same config with fixed reset ids and no auto_reset")
    pairs = []
    for key in sorted(da):
        if da[key].reset_id != db[key].reset_id:
            raise ValueError(f"pair_episodes: episode {key} started from reset id {da[key].reset_id} for A "
                             f"but {db[key].reset_id} for B; the episodes are not paired")
        pairs.append((da[key], db[key], key[0]))
    return pairs


@dataclass(frozen=True)
class PairedResult:
    """Success counts of A and B on n paired episodes; only_a / only_b = the discordant pairs.
    tasks: for episodes of several tasks, the same counts per task (empty for one task)."""

    n: int
    successes_a: int
    successes_b: int
    only_a: int
    only_b: int
    tasks: dict[str, PairedResult] = field(default_factory=dict)

    @property
    def both(self) -> int:
        return self.successes_a - self.only_a

    @property
    def p_value(self) -> float:
        """Two-sided exact McNemar p-value of 'A and B succeed equally often'."""
        return mcnemar_exact(self.only_a, self.only_b)

    @property
    def difference(self) -> float:
        """Success rate of A minus that of B (nan without episodes)."""
        return (self.successes_a - self.successes_b) / self.n if self.n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        def side(k: int) -> dict[str, Any]:
            low, high = wilson_interval(k, self.n)
            return {"successes": k, "episodes": self.n, "rate": k / self.n if self.n else None,
                    "ci95_low": low, "ci95_high": high}

        out = {"n": self.n, "A": side(self.successes_a), "B": side(self.successes_b),
               "difference": self.difference if self.n else None, "only_a": self.only_a, "only_b": self.only_b,
               "mcnemar_p": self.p_value}
        return out | ({"tasks": {t: r.to_dict() for t, r in self.tasks.items()}} if self.tasks else {})


def paired_result(pairs: Iterable[tuple[EpisodeOutcome, EpisodeOutcome, int]], metric: str = METRIC) -> PairedResult:
    """The counts of the pairs and, where they hold several tasks, of each task's pairs (the task
    of A's episode: both started from the same state, so from the same task)."""
    pairs = list(pairs)
    tasks = sorted({a.task_id for a, _, _ in pairs})
    outcomes = [(bool(getattr(a, metric)), bool(getattr(b, metric))) for a, b, _ in pairs]
    return PairedResult(
        n=len(outcomes), successes_a=sum(x for x, _ in outcomes), successes_b=sum(y for _, y in outcomes),
        only_a=sum(x and not y for x, y in outcomes), only_b=sum(y and not x for x, y in outcomes),
        tasks={t: paired_result([p for p in pairs if p[0].task_id == t], metric) for t in tasks} if len(tasks) > 1 else {},
    )


def paired_results(a: dict[str, EvalEpisodes], b: dict[str, EvalEpisodes], scorings: Sequence[str]) -> dict[str, PairedResult]:
    """Per scoring, A's and B's episodes paired by initial state and counted (ValueError when
    they do not pair, see pair_episodes)."""
    return {s: paired_result(pair_episodes(a[s], b[s])) for s in scorings}


def _episode_record(outcome: EpisodeOutcome) -> dict[str, Any]:
    return {"success_once": outcome.success_once, "success_at_end": outcome.success_at_end,
            "return": outcome.episode_return, "episode_len": outcome.episode_len, "failed": outcome.failed}


def comparison_report(sources: Sequence[PolicySource], scorings: Sequence[str],
                      episodes: dict[str, dict[str, EvalEpisodes]], metrics: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The content of comparison.json.

    episodes[label][scoring]: that policy's evaluation episodes; metrics[label]: its eval/*
    metrics as an evaluation logs them (means, intervals, per task)."""
    a, b = sources
    results, records = {}, {}
    for scoring in scorings:
        pairs = pair_episodes(episodes[a.label][scoring], episodes[b.label][scoring])
        results[scoring] = paired_result(pairs).to_dict()
        for ea, eb, epoch in pairs:
            rec = records.setdefault((epoch, ea.sub_env, ea.episode), {
                "epoch": epoch, "sub_env": ea.sub_env, "episode": ea.episode, "reset_id": ea.reset_id,
                "task_id": ea.task_id, a.label: {}, b.label: {}})
            rec[a.label][scoring], rec[b.label][scoring] = _episode_record(ea), _episode_record(eb)
    return {
        "metric": METRIC,
        "paired_by": "reset id: the same (eval epoch, sub-env, episode) under env.eval.use_fixed_reset_state_ids",
        "policies": {s.label: {"path": s.path, "kind": s.kind, "resolved": s.resolved} for s in sources},
        "scorings": list(scorings),
        "results": results,
        "metrics": metrics,
        "episodes": [records[k] for k in sorted(records)],
    }


def format_report(report: dict[str, Any]) -> list[str]:
    """Console lines: per scoring, both rates with intervals, the difference and McNemar."""
    pol = report["policies"]
    width = max(len(p["path"]) for p in pol.values())
    lines = []
    for scoring in report["scorings"]:
        r = report["results"][scoring]
        lines.append(f"{scoring}: {r['n']} paired episodes (same initial states), {report['metric']} with 95 % Wilson intervals")
        for label in ("A", "B"):
            lines.append(f"  {label} {pol[label]['path']:<{width}}  {format_rate(r[label]['successes'], r['n'])}")
        lines.append(f"  A - B: {_difference(r)}")
        for task, t in r.get("tasks", {}).items():
            lines.append(f"  {task}: A {format_rate(t['A']['successes'], t['n'])}, B {format_rate(t['B']['successes'], t['n'])}; "
                         f"A - B: {_difference(t)}")
    return lines


def _difference(r: dict[str, Any]) -> str:
    diff = "n/a" if r["difference"] is None else f"{100 * r['difference']:+.1f} points"
    return f"{diff}; discordant pairs: {r['only_a']} only A, {r['only_b']} only B; exact McNemar p = {r['mcnemar_p']:.3g}"
