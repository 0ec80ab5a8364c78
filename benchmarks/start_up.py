"""Start-up: seconds from starting the worker groups until the env workers can step.

A run starts Ray, the rollout workers (policy build), the actor ranks (FSDP set-up) and the env
workers; the env workers' sub-env processes (simulator import, scene, first render) start either
with the others (`build_groups(first_mode=...)`, what the runner does) or at the first interact
(`first_mode=None`, the baseline). Both are timed until every group is ready and the env workers
hold their train sub-envs, in the same process, alternating, on the tiny policy and ManiSkill
PickCube at 64 px (2 env workers, 1 rollout worker, 2 actor ranks). Printed: the median of each
and their ratio (below 1: faster).

`--compare prestart` times the same start (sub-envs with the groups) with Ray's default of
prestarting one idle worker per CPU when the driver connects (the baseline) against the session
the system starts (`worker_group.RAY_SYSTEM_CONFIG`: no prestart). Each round starts Ray anew.

    python benchmarks/start_up.py [--rounds 3] [--compare first_mode|prestart] [--set KEY=VALUE ...]
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
    p.add_argument("--compare", choices=["first_mode", "prestart"], default="first_mode")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override (repeatable): fewer workers for a smoke run")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from embodied_rl.configure import load_config
    from embodied_rl.runtime.train import ensure_model

    work = Path(tempfile.mkdtemp(prefix="start_up_"))
    (work / "start_up.yaml").write_text(CONFIG.format(out=work / "runs", model=work / "tiny", steps=1))
    cfg = load_config(str(work / "start_up.yaml"), a.set)
    ensure_model(cfg)
    from embodied_rl.distributed import worker_group

    ours_config = dict(worker_group.RAY_SYSTEM_CONFIG)
    # (label, first_mode, Ray system config): the baseline first
    settings = ([("lazy", None, ours_config), ("with the groups", "train", ours_config)] if a.compare == "first_mode"
                else [("Ray's prestart", "train", {}), ("no prestart", "train", ours_config)])
    times: dict[str, list[float]] = {label: [] for label, _, _ in settings}
    for r in range(a.rounds):
        for label, mode, system_config in settings:
            worker_group.RAY_SYSTEM_CONFIG = system_config
            times[label].append(ready_seconds(cfg, mode))
            print(f"round {r + 1}: {label}: {times[label][-1]:.1f} s", flush=True)
    (b, base), (o, ours) = ((label, statistics.median(times[label])) for label, _, _ in settings)
    print(f"| start until the env workers can step | {b} {base:.1f} s | {o} {ours:.1f} s | ratio {ours / base:.2f} |")


if __name__ == "__main__":
    main()
