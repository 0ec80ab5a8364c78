"""Uncertainty of success rates: pure functions of counts (no simulator, no torch).

A success rate from n episodes is a binomial proportion; with the tens of episodes a CPU (or a
paper's 50 LIBERO trials) affords, its sampling error is several points, so every rate is
reported with an interval and its episode count.
"""
from __future__ import annotations

import math
from statistics import NormalDist


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (successes of n trials).

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at 0 or n
    successes, which small evaluations hit often. n == 0 gives the uninformative (0, 1).
    """
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n], got {successes} of {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = successes / n, z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, center - half)  # exact ends, not rounding residue
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes.

    only_a: episodes (same initial state for both policies) that A solved and B did not;
    only_b: the reverse. Episodes both or neither solved carry no information about the
    difference. Under H0 the discordant pairs split as Binomial(only_a + only_b, 1/2).
    """
    if min(only_a, only_b) < 0:
        raise ValueError(f"counts must be >= 0, got {only_a}, {only_b}")
    m, k = only_a + only_b, min(only_a, only_b)
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(k + 1)) / 2**m
    return min(1.0, 2 * tail)


def format_rate(successes: int, n: int, confidence: float = 0.95) -> str:
    """'0.312 [0.179, 0.485] (10/32)': the rate, its Wilson interval and the counts."""
    if n == 0:
        return "n/a (0 episodes)"
    lo, hi = wilson_interval(successes, n, confidence)
    return f"{successes / n:.3f} [{lo:.3f}, {hi:.3f}] ({successes}/{n})"


SUCCESS_METRICS = ("success_once", "success_at_end")


def add_success_intervals(metrics: dict[str, float], prefix: str, confidence: float = 0.95) -> dict[str, float]:
    """Metrics plus a Wilson interval for every success rate among them.

    `<prefix>/success_once[/<task>]` (a mean over `<prefix>/num_trajectories[/<task>]`
    episodes) gets `<prefix>/success_once_ci95_low[/<task>]` and `..._ci95_high`.
    """
    tag = f"ci{round(100 * confidence)}"
    out = dict(metrics)
    for key, rate in metrics.items():
        head, _, task = key.removeprefix(f"{prefix}/").partition("/")
        if not key.startswith(f"{prefix}/") or head not in SUCCESS_METRICS:
            continue
        suffix = f"/{task}" if task else ""
        n = round(metrics.get(f"{prefix}/num_trajectories{suffix}", 0))
        if n < 1 or not math.isfinite(rate):
            continue
        low, high = wilson_interval(round(rate * n), n, confidence)
        out[f"{prefix}/{head}_{tag}_low{suffix}"] = low
        out[f"{prefix}/{head}_{tag}_high{suffix}"] = high
    return out
