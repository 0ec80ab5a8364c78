"""Making a ManiSkill env in a fresh process: SAPIEN's own BRDF table vs the zero table.

Each round runs two fresh interpreters that import ManiSkill, then make one PushCube-v1 env at
64 px (its first picture included, which gym.make takes) and take 10 steps. `sapien`: a bare
gym.make, so the renderer builds its default BRDF lookup table on the first picture, as every
sub-env process did before. `zero`: make_gym_env, which gives the cameras a 1x1 zero table first
(embodied_rl/envs/maniskill/brdf_lut.py; tests/test_env_brdf_lut.py shows the pictures are the
same). Times are the make's wall time and the process's CPU time over it (all threads, the
renderer's included). The order swaps every round; the ratios use summed times.

    python benchmarks/brdf_table.py [--rounds 3]
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
import numpy as np
from embodied_rl.process_env import configure_process_env
configure_process_env()
import gymnasium as gym
import mani_skill.envs  # noqa: F401
from embodied_rl.envs.maniskill.make import make_gym_env
from embodied_rl.envs.maniskill.params import ManiSkillParams

params = ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64)
wall, cpu = time.perf_counter(), time.process_time()
if sys.argv[1] == "zero":
    env = make_gym_env(params)
else:
    env = gym.make(params.id, obs_mode="rgb", control_mode=params.control_mode, num_envs=1,
                   sensor_configs={"width": 64, "height": 64})
make = (time.perf_counter() - wall, time.process_time() - cpu)
env.reset(seed=0)
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(10):
    env.step(np.zeros(env.action_space.shape, np.float32))
steps = (time.perf_counter() - wall, time.process_time() - cpu)
print(json.dumps({"make": make, "steps": steps}))
"""


def run(mode: str) -> dict[str, list[float]]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows: dict[str, list[dict]] = {"sapien": [], "zero": []}
    for r in range(args.rounds):
        for mode in (("sapien", "zero") if r % 2 == 0 else ("zero", "sapien")):
            rows[mode].append(run(mode))
            t = rows[mode][-1]
            print(f"round {r} {mode:6s} make {t['make'][0]:.2f} s wall, {t['make'][1]:.2f} s CPU; "
                  f"10 steps {t['steps'][0]:.2f} s wall", flush=True)
    n = args.rounds
    for i, what in enumerate(("wall", "CPU")):
        s = {m: sum(t["make"][i] for t in ts) for m, ts in rows.items()}
        print(f"make, {what}, mean: sapien {s['sapien'] / n:.2f} s, zero {s['zero'] / n:.2f} s: "
              f"sapien / zero = {s['sapien'] / s['zero']:.2f}x")
    s = {m: sum(t["steps"][0] for t in ts) for m, ts in rows.items()}
    print(f"10 steps after it, wall: sapien / zero = {s['sapien'] / s['zero']:.2f}x")


if __name__ == "__main__":
    main()
