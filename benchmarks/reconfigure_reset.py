"""Resets of a task that rebuilds its scene every episode (PegInsertionSide-v1), with the robot's
meshes as shipped vs clustered (init_params.robot_visual_cell): such a reset rebuilds the robot
with its full meshes, which are then clustered again.

Both settings in this process, alternating rounds; prints seconds per reset (after a first,
untimed one) and the ratio clustered / full.

    python benchmarks/reconfigure_reset.py [--cell 0.008] [--resets 5] [--rounds 2]
"""
from __future__ import annotations

import argparse
import statistics
import time


def resets(cell: float | None, n: int) -> float:
    from embodied_rl.envs.maniskill import ManiSkillParams
    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv

    sub = ManiSkillSubEnv(ManiSkillParams(id="PegInsertionSide-v1", camera_heights=64, camera_widths=64, robot_visual_cell=cell),
                          "insert the peg into the hole")
    try:
        sub.reset(0)
        t0 = time.perf_counter()
        for r in range(1, n + 1):
            sub.reset(r)
        return (time.perf_counter() - t0) / n
    finally:
        sub.close()


def main() -> None:
    from embodied_rl.process_env import configure_process_env

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cell", type=float, default=0.008)
    p.add_argument("--resets", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    configure_process_env()
    settings = {"full meshes": None, f"cell {args.cell * 1000:g} mm": args.cell}
    names = list(settings)
    secs: dict[str, list[float]] = {s: [] for s in names}
    for r in range(args.rounds):
        for s in names if r % 2 == 0 else names[::-1]:
            secs[s].append(resets(settings[s], args.resets))
    for s in names:
        print(f"{s:12s} {statistics.median(secs[s]):.3f} s per PegInsertionSide-v1 reset (median of {args.rounds})")
    print(f"clustered / full: {statistics.median(secs[names[1]]) / statistics.median(secs[names[0]]):.2f}x")


if __name__ == "__main__":
    main()
