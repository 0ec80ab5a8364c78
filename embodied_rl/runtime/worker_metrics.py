"""Combining the metrics that several workers of a group report for one rollout epoch, and the
epochs of one training step."""
from __future__ import annotations

from embodied_rl.envs.metrics import merge_metrics


def merge_env_metrics(parts: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """Episode-weighted means over env workers, renamed env/* -> <prefix>/*; time/* and channel/* combined."""
    return {**{f"{prefix}/{k[4:]}": v for k, v in merge_metrics(parts, "env/").items()}, **combine_worker_metrics(parts)}


def combine_worker_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """time/* as the slowest worker's, channel/* counters summed over workers."""
    out = {}
    for key in {k for p in parts for k in p}:
        values = [p[key] for p in parts if key in p]
        if key.startswith("time/"):
            out[key] = max(values)
        elif key.startswith("channel/"):
            out[key] = sum(values)
    return out


def combine_epoch_metrics(epochs: list[dict[str, float]]) -> dict[str, float]:
    """One training step's metrics from its rollout epochs' (each already combined over workers):
    time/* seconds and channel/* counters add up over the epochs, as the step's own time/rollout_s
    does; everything else (episode statistics) is the mean over the epochs."""
    out: dict[str, float] = {}
    for m in epochs:
        for k, v in m.items():
            out[k] = out.get(k, 0.0) + (v if k.startswith(("time/", "channel/")) else v / len(epochs))
    return out
