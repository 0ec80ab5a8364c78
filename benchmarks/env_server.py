"""Env server overhead: rollout time of the same ManiSkill task and sub-env count in-process (the
env worker's own sub-env pool) and served (an env server spawned with this interpreter,
embodied_rl/envs/service), measured in one run, the sides alternated round by round. A spawned
server sends its images through shared memory; the third side, "pickled", is the same server with
its images pickled into the replies (as a server at an address sends them), for the ratio of the two.

A rollout epoch: `reset()` then --chunk-steps chunk steps of --chunk fixed (zero) actions through
`ChunkedVectorEnv`, as an env worker runs it (images rendered where the policy reads them). The
first epoch of each side is a warm-up and not timed. Goal: served / in-process within 1.15x.

    python benchmarks/env_server.py [--task PushCube-v1] [--envs 2] [--size 64] [--chunk-steps 10] [--rounds 3]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from unittest import mock

import numpy as np

import embodied_rl  # noqa: F401  (torchvision shim first)
from embodied_rl.config.schema.env import EnvConfig, ServerConfig
from embodied_rl.envs import make_env
from embodied_rl.envs.service import client
from embodied_rl.process_env import configure_process_env

SIDES = ("in-process", "served", "pickled")


def env_config(args: argparse.Namespace, served: bool) -> EnvConfig:
    params = {"id": args.task, "camera_heights": args.size, "camera_widths": args.size, "robot_visual_cell": 0.008}
    return EnvConfig(env_type="maniskill", task_description="push the cube", init_params=params,
                     max_episode_steps=args.chunk_steps * args.chunk, server=ServerConfig(python=sys.executable) if served else None)


def build(args: argparse.Namespace, side: str):
    # "pickled": the client offers no shared-memory prefix, as for a server on another host
    no_shm = mock.patch.object(client, "new_prefix", lambda: None) if side == "pickled" else contextlib.nullcontext()
    with no_shm:
        return make_env(env_config(args, side != "in-process"), args.envs)


def epoch(env, args: argparse.Namespace) -> float:
    actions = np.zeros((args.envs, args.chunk, 7), np.float32)
    t = time.perf_counter()
    env.reset()
    for _ in range(args.chunk_steps):
        env.chunk_step(actions)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="PushCube-v1")
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=8, help="actions per chunk step")
    ap.add_argument("--chunk-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    configure_process_env()
    envs, start = {}, {}
    try:
        for side in SIDES:
            t = time.perf_counter()
            envs[side] = build(args, side)
            start[side] = time.perf_counter() - t
            epoch(envs[side], args)  # warm-up
        times: dict[str, list[float]] = {side: [] for side in envs}
        for r in range(args.rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                times[side].append(epoch(envs[side], args))
            print(f"round {r}: " + ", ".join(f"{s} {times[s][-1]:.2f} s" for s in envs), flush=True)
    finally:
        for env in envs.values():
            env.close()
    frames = args.envs * args.chunk * args.chunk_steps
    med = {side: statistics.median(ts) for side, ts in times.items()}
    for side in envs:
        print(f"{side:>10}: start {start[side]:.1f} s, epoch median {med[side]:.3f} s ({frames / med[side]:.1f} env frames/s)")
    print(f"{args.task}, {args.envs} sub-envs, {args.size} px, {args.chunk_steps} chunk steps of {args.chunk}: "
          f"served / in-process: {med['served'] / med['in-process']:.3f}x; shared memory / pickled: {med['served'] / med['pickled']:.3f}x")


if __name__ == "__main__":
    main()
