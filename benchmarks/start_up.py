"""Start-up: seconds from starting the worker groups until the env workers can step.

A run starts Ray, the rollout workers (policy build), the actor ranks (FSDP set-up) and the env
workers; the env workers' sub-env processes (simulator import, scene, first render) start either
with the others (`build_groups(first_mode=...)`, what the runner does) or at the first interact
(`first_mode=None`, the baseline). Both are timed until every group is ready and the env workers
hold their train sub-envs, in the same process, alternating, on the tiny policy and ManiSkill
PickCube at 64 px (2 env workers, 1 rollout worker, 2 actor ranks). Printed: the median of each
and their ratio (below 1: faster).

    python benchmarks/start_up.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

# The run benchmarks/recovery.py interrupts: the same groups and sub-envs.
from recovery import CONFIG  # benchmarks/ is this script's directory


def ready_seconds(cfg, first_mode: str | None) -> float:
    """Wall seconds from build_groups until the train sub-envs exist (groups shut down after)."""
    from embodied_rl.runtime.groups import build_groups

    t0 = time.perf_counter()
    groups = build_groups(cfg, with_actor=True, run_name="start_up", video_dirs={}, first_mode=first_mode)
    try:
        groups.env.build("train").wait()  # a no-op where they were built with the groups
        return time.perf_counter() - t0
    finally:
        groups.env.close().wait()  # the sub-env processes, as a run's close does
        groups.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from embodied_rl.configure import load_config
    from embodied_rl.runtime.train import ensure_model

    work = Path(tempfile.mkdtemp(prefix="start_up_"))
    (work / "start_up.yaml").write_text(CONFIG.format(out=work / "runs", model=work / "tiny", steps=1))
    cfg = load_config(str(work / "start_up.yaml"))
    ensure_model(cfg)
    times: dict[str, list[float]] = {"lazy": [], "with the groups": []}
    for r in range(a.rounds):
        for name, mode in (("lazy", None), ("with the groups", "train")):
            times[name].append(ready_seconds(cfg, mode))
            print(f"round {r + 1}: sub-envs built {name}: {times[name][-1]:.1f} s", flush=True)
    base, ours = statistics.median(times["lazy"]), statistics.median(times["with the groups"])
    print(f"| start until the env workers can step | lazy {base:.1f} s | with the groups {ours:.1f} s | ratio {ours / base:.2f} |")


if __name__ == "__main__":
    main()
