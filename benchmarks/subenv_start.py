"""Start-up of ManiSkill sub-env processes with the fork server's preload vs without it.

Each round runs two fresh interpreters that each build `--pools` pools of `--envs` ManiSkill
sub-envs one after another (as an env worker builds its train and eval pools, or rebuilds a
crashed sub-env) and time each pool from construction to its first reset. `preload`: as shipped,
the fork server imports ManiSkill once (the factory's `preload`). `baseline`: the fork server is
started before the first pool, so the preload comes too late and every child imports ManiSkill
itself, as before the preload existed. The order swaps every round; the ratio uses summed times.

    python benchmarks/subenv_start.py [--envs 2] [--pools 3] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, sys, time
import multiprocessing.forkserver as fs
from embodied_rl.process_env import configure_process_env
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory
from embodied_rl.envs.subproc_pool import SubprocEnvPool

configure_process_env()
mode, envs, pools = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode == "baseline":
    fs.ensure_running()  # the server exists before any factory asks for a preload
factory = ManiSkillSubEnvFactory(ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64), "push the cube")
times = []
for _ in range(pools):
    t0 = time.perf_counter()
    pool = SubprocEnvPool(factory, envs)
    pool.reset(list(range(envs)), list(range(envs)))
    times.append(time.perf_counter() - t0)
    pool.close()
print(json.dumps(times))
"""


def run(mode: str, envs: int, pools: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(envs), str(pools)], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--pools", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    times: dict[str, list[list[float]]] = {"baseline": [], "preload": []}
    for r in range(args.rounds):
        for mode in (("baseline", "preload") if r % 2 == 0 else ("preload", "baseline")):
            times[mode].append(run(mode, args.envs, args.pools))
            print(f"round {r} {mode:8s} pool start-up (s): " + " ".join(f"{t:.2f}" for t in times[mode][-1]), flush=True)
    first = {m: sum(t[0] for t in ts) for m, ts in times.items()}
    later = {m: sum(sum(t[1:]) for t in ts) for m, ts in times.items()}
    total = {m: first[m] + later[m] for m in times}
    n = args.rounds
    print(f"first pool, mean: baseline {first['baseline'] / n:.2f} s, preload {first['preload'] / n:.2f} s")
    if args.pools > 1:
        k = n * (args.pools - 1)
        print(f"later pools, mean: baseline {later['baseline'] / k:.2f} s, preload {later['preload'] / k:.2f} s "
              f"(ratio {later['baseline'] / later['preload']:.2f}x)")
    print(f"all pools: baseline / preload = {total['baseline'] / total['preload']:.2f}x")


if __name__ == "__main__":
    main()
