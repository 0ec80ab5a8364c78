"""Software rendering with the robot's full visual meshes vs clustered ones (init_params.robot_visual_cell).

Two measurements, each alternating the settings and swapping their order every round:

1. per picture: the CPU time of one 64 px `base_camera` picture (ManiSkill's get_obs) of a
   PushCube-v1 env made by the project's own make_gym_env, and the mean absolute pixel
   difference between the two settings' pictures over an episode start and 8 actions;
2. per training step: the learning recipe's PPO step through the real CLI (actor_micro_batch.py's
   RECIPE: 16 sub-envs, 4 rollout epochs, 64 episodes), `time/rollout_s` and `time/step_s` of
   the steps after the first (warm-up), with the meshes full on every env and clustered.

    python benchmarks/render_mesh.py [--cell 0.008] [--pictures 60] [--steps 3] [--rounds 1] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from actor_micro_batch import run as run_recipe  # the same PPO step, another setting

from embodied_rl.envs.maniskill import ManiSkillParams
from embodied_rl.envs.maniskill.make import make_gym_env
from embodied_rl.process_env import configure_process_env


def pictures(cell: float | None, n: int) -> tuple[float, list[np.ndarray]]:
    """(CPU ms per picture, the pictures of reset 3 and 8 actions) with the given setting."""
    env = make_gym_env(ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64, robot_visual_cell=cell))
    try:
        base = env.unwrapped
        env.reset(seed=3)
        for _ in range(5):
            base.get_obs()
        t0 = time.process_time()
        for _ in range(n):
            base.get_obs()
        ms = (time.process_time() - t0) / n * 1e3
        action = np.array([0.5, 0.0, -0.3, 0.0, 0.0, 0.0, 1.0], np.float32)
        shots = [base.get_obs()["sensor_data"]["base_camera"]["rgb"][0].numpy()]
        for _ in range(8):
            obs, *_ = env.step(action)
            shots.append(obs["sensor_data"]["base_camera"]["rgb"][0].numpy())
        return ms, shots
    finally:
        env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cell", type=float, default=0.008)
    p.add_argument("--pictures", type=int, default=60)
    p.add_argument("--steps", type=int, default=3, help="PPO steps per CLI run (the first is not timed); 0 skips them")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override of the PPO runs after the recipe's (repeatable): smaller sizes for a smoke run")
    args = p.parse_args()
    configure_process_env()  # software Vulkan, as the env workers have it
    settings = {"full meshes": None, f"cell {args.cell * 1000:g} mm": args.cell}
    names = list(settings)
    ms: dict[str, list[float]] = {s: [] for s in settings}
    shots: dict[str, list[np.ndarray]] = {}
    for r in range(args.rounds):
        for s in names if r % 2 == 0 else names[::-1]:
            cpu, shots[s] = pictures(settings[s], args.pictures)
            ms[s].append(cpu)
    diff = np.mean([np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(shots[names[0]], shots[names[1]])])
    for s in names:
        print(f"{s:14s} {statistics.median(ms[s]):6.2f} ms CPU per 64 px picture (median of {args.rounds})")
    print(f"picture ratio: {statistics.median(ms[names[0]]) / statistics.median(ms[names[1]]):.2f}x; "
          f"mean |pixel difference| {diff:.3f} of 255 over 9 pictures")
    if args.steps <= 0:
        return
    rollout: dict[str, list[float]] = {s: [] for s in settings}
    step: dict[str, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(args.rounds):
            for i, s in enumerate(names if r % 2 == 0 else names[::-1]):
                value = "null" if settings[s] is None else settings[s]
                rows = run_recipe([*(f"env.{m}.init_params.robot_visual_cell={value}" for m in ("train", "eval")), *args.set],
                                  args.steps, work, index=r * len(names) + i)
                rollout[s] += [row["time/rollout_s"] for row in rows[1:]]
                step[s] += [row["time/step_s"] for row in rows[1:]]
                print(f"round {r} {s}: rollout_s {[round(row['time/rollout_s'], 2) for row in rows]}", flush=True)
    for s in names:
        print(f"{s:14s} rollout {statistics.median(rollout[s]):6.2f} s/step, whole step {statistics.median(step[s]):6.2f} s (medians)")
    print(f"PPO step ratio: rollout {sum(rollout[names[0]]) / sum(rollout[names[1]]):.2f}x, "
          f"whole step {sum(step[names[0]]) / sum(step[names[1]]):.2f}x")


if __name__ == "__main__":
    main()
