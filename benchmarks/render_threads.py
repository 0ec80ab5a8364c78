"""Software rendering threads per simulator process: Mesa's default vs `LP_NUM_THREADS=0`.

On a machine without a GPU, SAPIEN (ManiSkill) renders through lavapipe and MuJoCo (LIBERO)
through llvmpipe; both start one rasterizer thread per CPU in *every* simulator process. With
one process per sub-env, a 2-core box running 4 sims has 4 x 2 rasterizer threads handing
64-128 px images back and forth. LP_NUM_THREADS=0 rasterizes in the simulator's own thread;
nothing sets it yet (first measurement: no gain in isolation). This benchmark measures
both on the adapter path (`ChunkedVectorEnv`, chunks of 8, auto-reset, random actions): two
env pools of N sub-envs built side by side, one per setting, rounds alternated (order swapped
every round); the ratio is summed steps/s of LP_NUM_THREADS=0 over the default.

    python benchmarks/render_threads.py --sim maniskill --envs 1 4
    python benchmarks/render_threads.py --sim libero --envs 2 --steps 24
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np

import embodied_rl  # noqa: F401  (import order: torchvision shim)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs import make_env
from embodied_rl.process_env import configure_process_env


def env_cfg(sim: str, n: int, size: int) -> EnvConfig:
    """overhead.py's env config of the simulator (same task, episode length), with n sub-envs."""
    import overhead  # benchmarks/overhead.py (this script's directory is on sys.path)

    args = argparse.Namespace(task=None, size=size)
    return dataclasses.replace(overhead.CASES[sim].env_cfg(args), total_num_envs=n)


def build(cfg: EnvConfig, n: int, lp_threads: str | None):
    """An env pool whose simulator processes start with LP_NUM_THREADS as given (None = unset)."""
    saved = os.environ.pop("LP_NUM_THREADS", None)
    if lp_threads is not None:
        os.environ["LP_NUM_THREADS"] = lp_threads
    try:
        env = make_env(cfg, n)
    finally:
        os.environ.pop("LP_NUM_THREADS", None)
        if saved is not None:
            os.environ["LP_NUM_THREADS"] = saved
    env.reset()
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", choices=("maniskill", "libero"), default="maniskill")
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 4], help="sub-envs (processes) per pool")
    ap.add_argument("--size", type=int, default=64, help="camera height and width")
    ap.add_argument("--steps", type=int, default=48, help="env steps per sub-env per round (multiple of 8)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    configure_process_env()
    rng = np.random.default_rng(0)
    settings = {"default": None, "LP_NUM_THREADS=0": "0"}
    print(f"{args.sim}, {args.size} px, {os.cpu_count()} CPUs; env steps/s summed over sub-envs", flush=True)
    for n in args.envs:
        cfg = env_cfg(args.sim, n, args.size)
        envs = {name: build(cfg, n, value) for name, value in settings.items()}
        adim = envs["default"].backend.action_dim
        seconds = dict.fromkeys(settings, 0.0)
        for r in range(args.rounds):
            order = list(settings) if r % 2 == 0 else list(reversed(settings))
            for name in order:
                t0 = time.perf_counter()
                for _ in range(args.steps // 8):
                    envs[name].chunk_step(rng.uniform(-1, 1, (n, 8, adim)).astype(np.float32))
                seconds[name] += time.perf_counter() - t0
        for env in envs.values():
            env.close()
        rate = {name: n * args.steps * args.rounds / s for name, s in seconds.items()}
        print(f"N={n}: default {rate['default']:.1f} steps/s, LP_NUM_THREADS=0 {rate['LP_NUM_THREADS=0']:.1f} steps/s, "
              f"ratio {rate['LP_NUM_THREADS=0'] / rate['default']:.3f}", flush=True)


if __name__ == "__main__":
    main()
