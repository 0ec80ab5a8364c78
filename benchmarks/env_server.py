"""Env server overhead: rollout time of the same ManiSkill task and sub-env count in-process (the
env worker's own sub-env pool) and served (an env server spawned with this interpreter,
embodied_rl/envs/service), measured in one run, the sides alternated round by round. A spawned
server sends its images through shared memory; the third side, "pickled", is the same server with
its images pickled into the replies (as a server at an address sends them), for the ratio of the two.

A rollout epoch: `reset()` then --chunk-steps chunk steps of --chunk fixed (zero) actions through
`ChunkedVectorEnv`, as an env worker runs it (images rendered where the policy reads them). The
first epoch of each side is a warm-up and not timed. Goal: served / in-process within 1.15x.

    python benchmarks/env_server.py [--task PushCube-v1] [--envs 2] [--size 64] [--chunk-steps 10] [--rounds 3]
    python benchmarks/env_server.py --transfer [--envs 16 --cameras 2 --size 128] [--replies 200] [--rounds 3]
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


def _serve_replies(conn, obs, prefix: str | None) -> None:
    """A stand-in server: answers each request with `obs`, its images shipped as a spawned server does."""
    from embodied_rl.envs.service.shared_images import ImageShipper

    shipper = ImageShipper(prefix, min_bytes=0) if prefix else None
    try:
        while conn.recv():
            conn.send(shipper.ship(obs) if shipper else obs)
    finally:
        if shipper:
            shipper.close()


def transfer(args: argparse.Namespace) -> None:
    """One reply's transfer alone (no simulator): an observation batch of --envs x --cameras images
    of --size px sent by another process over a Unix-socket connection, pickled and through shared
    memory, request by request, the two alternated round by round."""
    import multiprocessing as mp

    from embodied_rl.envs.service.shared_images import ImageReceiver, new_prefix
    from embodied_rl.types import EnvObservation

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (args.envs, args.size, args.size, 3), dtype=np.uint8) for _ in range(args.cameras)]
    obs = EnvObservation(main_images=images[0], wrist_images=images[1] if args.cameras > 1 else None,
                         states=np.zeros((args.envs, 9), np.float32), task_descriptions=["push the cube"] * args.envs)
    times: dict[str, list[float]] = {"pickled": [], "shared memory": []}
    ctx = mp.get_context("fork")
    links = {}
    for side in times:
        prefix = new_prefix() if side == "shared memory" else None
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=_serve_replies, args=(theirs, obs, prefix), daemon=True)
        proc.start()
        links[side] = (mine, proc, ImageReceiver(prefix) if prefix else None)
    try:
        for r in range(args.rounds):
            for side in times if r % 2 == 0 else list(times)[::-1]:
                conn, _, receiver = links[side]
                t = time.perf_counter()
                for _ in range(args.replies):
                    conn.send(True)
                    got = conn.recv()
                    if receiver:
                        got = receiver.receive(got)
                times[side].append((time.perf_counter() - t) / args.replies)
                assert np.array_equal(got.main_images, obs.main_images)
    finally:
        for conn, proc, receiver in links.values():
            conn.send(False)
            proc.join(timeout=30)
            if receiver:
                receiver.sweep()
    med = {side: statistics.median(ts) for side, ts in times.items()}
    mb = sum(a.nbytes for a in images) / 2**20
    print(f"{args.envs} sub-envs x {args.cameras} camera(s) x {args.size} px ({mb:.2f} MiB of images), {args.replies} replies x "
          f"{args.rounds} rounds: pickled {med['pickled'] * 1e3:.3f} ms, shared memory {med['shared memory'] * 1e3:.3f} ms per reply; "
          f"shared memory / pickled: {med['shared memory'] / med['pickled']:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="PushCube-v1")
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=8, help="actions per chunk step")
    ap.add_argument("--chunk-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transfer", action="store_true", help="time only the transfer of one reply's observation batch, "
                    "pickled and through shared memory, between two processes (no simulator)")
    ap.add_argument("--cameras", type=int, default=1, help="--transfer: images per sub-env")
    ap.add_argument("--replies", type=int, default=200, help="--transfer: replies per round")
    args = ap.parse_args()
    if args.transfer:
        transfer(args)
        return
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
