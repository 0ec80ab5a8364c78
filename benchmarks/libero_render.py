"""LIBERO steps with the scene's meshes as shipped vs its render-only meshes clustered
(init_params.visual_mesh_cell).

Each setting runs a libero_spatial task-0 sub-env (two cameras, as the policy reads them) in a
process of its own, as sub-envs always run: the CPU time of `--steps` steps after a reset, and
the pictures of the reset and 8 actions. Settings alternate within a round and swap order every
round; the ratio is full / clustered, the pixel difference the mean absolute one over both
cameras' pictures.

    python benchmarks/libero_render.py [--size 64] [--cell 0.008] [--steps 20] [--rounds 2]
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

import numpy as np


def measure(size: int, cell: float | None, steps: int) -> tuple[float, float, list[np.ndarray], int]:
    """(CPU ms per step, CPU s of the build and first reset, pictures of the reset and 8 actions,
    render-only triangles) of one setting."""
    from embodied_rl.envs.libero.params import LiberoParams
    from embodied_rl.envs.libero.sub_env import LiberoSubEnv
    from embodied_rl.envs.libero.visual_lod import render_only_meshes
    from embodied_rl.process_env import configure_process_env

    configure_process_env()
    t0 = time.process_time()
    env = LiberoSubEnv(LiberoParams(task_suite_name="libero_spatial", task_ids=[0], camera_heights=size, camera_widths=size,
                                    visual_mesh_cell=cell))
    try:
        obs = env.reset(0)  # builds the task's env (and clusters its meshes)
        build = time.process_time() - t0
        shots = [obs["main_image"], obs["wrist_image"]]
        action = np.array([0.4, 0.1, -0.3, 0.0, 0.0, 0.1, -1.0])
        for _ in range(8):
            obs = env.step(action)[0]
            shots += [obs["main_image"], obs["wrist_image"]]
        env.reset(1)
        t0 = time.process_time()
        for _ in range(steps):
            env.step(np.zeros(7))
        ms = (time.process_time() - t0) / steps * 1e3
        model = env.sim.model._model
        return ms, build, shots, int(model.mesh_facenum[render_only_meshes(model)].sum())
    finally:
        env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=64, help="camera height and width in pixels")
    p.add_argument("--cell", type=float, default=0.008, help="visual_mesh_cell in metres")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    settings = {"as shipped": None, f"cell {args.cell * 1000:g} mm": args.cell}
    names = list(settings)
    ms: dict[str, list[float]] = {s: [] for s in names}
    build: dict[str, list[float]] = {s: [] for s in names}
    shots: dict[str, list[np.ndarray]] = {}
    faces: dict[str, int] = {}
    ctx = multiprocessing.get_context("spawn")
    for r in range(args.rounds):
        for s in names if r % 2 == 0 else names[::-1]:
            with ctx.Pool(1) as pool:
                cpu, start, shots[s], faces[s] = pool.apply(measure, (args.size, settings[s], args.steps))
            ms[s].append(cpu)
            build[s].append(start)
    diff = np.mean([np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(shots[names[0]], shots[names[1]])])
    for s in names:
        print(f"{s:12s} {statistics.median(ms[s]):7.1f} ms CPU per {args.size} px step, two cameras "
              f"(median of {args.rounds}); build + first reset {statistics.median(build[s]):.2f} s CPU; "
              f"{faces[s]} render-only triangles")
    print(f"step ratio: {statistics.median(ms[names[0]]) / statistics.median(ms[names[1]]):.2f}x; "
          f"mean |pixel difference| {diff:.2f} of 255 over {len(shots[names[0]])} pictures")


if __name__ == "__main__":
    main()
