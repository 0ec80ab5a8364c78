"""Rendering on demand: ChunkedVectorEnv steps of ManiSkill with images rendered only where they
are read (the chunk's last step, episode ends) vs rendered on every step.

Same task, camera, seeds and random actions on both sides (chunks of `--chunk` actions, auto-reset,
`--max-steps` episodes); `eager` is the same backend told that its sub-envs cannot skip rendering,
as a simulator without the feature behaves. Eager and lazy rounds alternate (and swap order every
round) so a noisy machine affects both alike; the ratio uses the summed times.

    python benchmarks/render_on_demand.py [--envs 2] [--size 64] [--chunk 8] [--rounds 4] [--chunks 20]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

import embodied_rl  # noqa: F401  (import order: torchvision shim)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs import ChunkedVectorEnv
from embodied_rl.envs.maniskill import ManiSkillBackend, ManiSkillParams
from embodied_rl.envs.reset_split import seed_split
from embodied_rl.process_env import configure_process_env


def build(args: argparse.Namespace, eager: bool) -> ChunkedVectorEnv:
    params = ManiSkillParams(id=args.task, camera_heights=args.size, camera_widths=args.size, reward_mode="normalized_dense")
    cfg = EnvConfig(env_type="maniskill", task_description="push the cube", seed=0, init_params=dataclasses.asdict(params),
                    max_episode_steps=args.max_steps, auto_reset=True, ignore_terminations=True)
    backend = ManiSkillBackend(cfg, params, args.envs, seed=0)
    if eager:
        backend.pool.renders_on_demand = False
    return ChunkedVectorEnv(backend, cfg, reset_id_space=seed_split("train"))


def run(env: ChunkedVectorEnv, args: argparse.Namespace, seed: int) -> float:
    rng = np.random.default_rng(seed)
    env.reset()
    t0 = time.perf_counter()
    for _ in range(args.chunks):
        env.chunk_step(rng.uniform(-1, 1, (args.envs, args.chunk, 7)).astype(np.float32))
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="PushCube-v1")
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--chunks", type=int, default=20, help="chunk steps per round")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    configure_process_env()
    envs = {"eager": build(args, eager=True), "lazy": build(args, eager=False)}
    try:
        totals = {"eager": 0.0, "lazy": 0.0}
        for r in range(args.rounds):
            for name in (("eager", "lazy") if r % 2 == 0 else ("lazy", "eager")):
                totals[name] += run(envs[name], args, seed=r)
    finally:
        for env in envs.values():
            env.close()
    steps = args.rounds * args.chunks * args.chunk * args.envs
    for name, total in totals.items():
        print(f"{name:5s}  {steps / total:7.1f} env steps/s  ({total:.1f} s for {steps} steps of {args.envs} sub-envs)")
    print(f"lazy / eager throughput: {totals['eager'] / totals['lazy']:.2f}x")


if __name__ == "__main__":
    main()
