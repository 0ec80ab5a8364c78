"""Env-layer overhead: ChunkedVectorEnv over the subprocess pool vs raw gymnasium stepping.

Same task, camera and random actions; the adapter path runs chunks of `--chunk` actions with
auto-reset (the training configuration), the raw path calls `env.step` directly (N=1: in-process
`gym.make`; N>1: gymnasium `AsyncVectorEnv` over ManiSkill's `CPUGymWrapper`). Raw and adapter
rounds alternate (and swap order every round) so a noisy machine affects both alike; the ratio
uses the summed times.

    python benchmarks/overhead.py --sim maniskill --envs 1 2 [--video]
    python benchmarks/overhead.py --sim libero --envs 1 --size 128

Other simulators add a `Case` to CASES (build the raw stepper and the env config).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import embodied_rl  # noqa: F401  (import order: torchvision shim)
from embodied_rl.config.schema.env import EnvConfig, VideoConfig
from embodied_rl.envs import make_env
from embodied_rl.process_env import configure_process_env


@dataclass
class RawStepper:
    """`step(k)` runs k env steps of every sub-env (resetting finished ones); `close()`."""

    step: Callable[[int], None]
    close: Callable[[], None]


@dataclass
class Case:
    env_cfg: Callable[[argparse.Namespace], EnvConfig]
    raw: Callable[[argparse.Namespace, int], RawStepper]
    action_dim: int


# ----------------------------------------------------------------------------- ManiSkill
def _maniskill_cfg(args: argparse.Namespace) -> EnvConfig:
    return EnvConfig(
        env_type="maniskill", task_description="pick up the red cube", max_episode_steps=50, auto_reset=True,
        init_params={"id": args.task or "PickCube-v1", "camera_heights": args.size, "camera_widths": args.size},
    )


def _maniskill_make(task: str, size: int):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    env = gym.make(task, obs_mode="rgb", control_mode="pd_ee_delta_pose", render_backend="cpu",
                   sim_backend="physx_cpu", reward_mode="sparse", sensor_configs={"width": size, "height": size})
    return CPUGymWrapper(env)


def _maniskill_raw(args: argparse.Namespace, n: int) -> RawStepper:
    import functools

    import gymnasium as gym

    task = args.task or "PickCube-v1"
    rng = np.random.default_rng(0)
    if n == 1:
        env = _maniskill_make(task, args.size)
        env.reset(seed=0)

        def step1(k: int) -> None:
            for _ in range(k):
                _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
                if term or trunc:
                    env.reset()

        return RawStepper(step1, env.close)
    # SAME_STEP: a finished sub-env resets inside the step that ended it (as ChunkedVectorEnv
    # does), so every counted step is a real env step (NEXT_STEP would count resets as steps).
    venv = gym.vector.AsyncVectorEnv([functools.partial(_maniskill_make, task, args.size)] * n, context="forkserver",
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    venv.reset(seed=0)

    def stepn(k: int) -> None:
        for _ in range(k):
            venv.step(rng.uniform(-1, 1, (n, 7)).astype(np.float32))

    return RawStepper(stepn, venv.close)


# ----------------------------------------------------------------------------- LIBERO
def _libero_cfg(args: argparse.Namespace) -> EnvConfig:
    # Episodes longer than the measurement: both paths step without resets.
    return EnvConfig(
        env_type="libero", max_episode_steps=100_000, auto_reset=True,
        init_params={"task_suite_name": args.task or "libero_spatial", "task_ids": [0],
                         "camera_heights": args.size, "camera_widths": args.size},
    )


def _libero_make(suite: str, size: int):
    from embodied_rl.envs.libero.setup import ensure_libero_ready
    from embodied_rl.envs.libero.suites import load_init_states, suite_tasks

    ensure_libero_ready()
    from libero.libero.envs import OffScreenRenderEnv

    task = suite_tasks(suite)[0]
    env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=size, camera_widths=size,
                             hard_reset=False, ignore_done=True)
    env.reset()
    env.set_init_state(load_init_states(task.init_states_file)[0])
    return env


def _libero_raw(args: argparse.Namespace, n: int) -> RawStepper:
    import functools

    suite = args.task or "libero_spatial"
    rng = np.random.default_rng(0)
    if n == 1:
        env = _libero_make(suite, args.size)

        def step1(k: int) -> None:
            for _ in range(k):
                env.step(rng.uniform(-1, 1, 7))

        return RawStepper(step1, env.close)
    from libero.libero.envs import (
        SubprocVectorEnv,  # LIBERO's own process-per-env vector env
    )

    venv = SubprocVectorEnv([functools.partial(_libero_make, suite, args.size)] * n)

    def stepn(k: int) -> None:
        for _ in range(k):
            venv.step(rng.uniform(-1, 1, (n, 7)))

    return RawStepper(stepn, venv.close)


CASES: dict[str, Case] = {
    "maniskill": Case(_maniskill_cfg, _maniskill_raw, action_dim=7),
    "libero": Case(_libero_cfg, _libero_raw, action_dim=7),
}


# ----------------------------------------------------------------------------- measurement
def measure(case: Case, args: argparse.Namespace, n: int, video_dir: str) -> tuple[float, float, float | None]:
    """(raw, adapter, adapter while recording video or None) env-steps/s for n sub-envs.

    The recording rounds include `end_video()` (waiting for the encoder to finish the mp4).
    """
    chunks = max(1, args.steps // args.chunk)
    steps = chunks * args.chunk
    rng = np.random.default_rng(1)
    cfg = case.env_cfg(args)
    cfg.video_cfg = VideoConfig(save_video=args.video, video_base_dir=video_dir)
    env = make_env(cfg, n)
    raw = case.raw(args, n)

    def run_adapter() -> float:
        actions = rng.uniform(-1, 1, (chunks, n, args.chunk, case.action_dim)).astype(np.float32)
        t0 = time.perf_counter()
        for a in actions:
            env.chunk_step(a)
        return time.perf_counter() - t0

    try:
        env.reset()
        run_adapter()  # warm-up
        raw.step(args.chunk)
        t_raw = t_adapter = t_video = 0.0
        for r in range(args.rounds):
            if r % 2:  # alternate which path goes first, so load drifts hit both alike
                t_adapter += run_adapter()
            t0 = time.perf_counter()
            raw.step(steps)
            t_raw += time.perf_counter() - t0
            if r % 2 == 0:
                t_adapter += run_adapter()
            if args.video:
                env.begin_video(r, r, "train", "overhead-benchmark")
                t_video += run_adapter()
                t0 = time.perf_counter()
                env.end_video()
                t_video += time.perf_counter() - t0
    finally:
        raw.close()
        env.close()
    total = args.rounds * steps * n
    return total / t_raw, total / t_adapter, (total / t_video if args.video else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", choices=sorted(CASES), default="maniskill")
    p.add_argument("--task", default=None, help="task id (default: the case's default task)")
    p.add_argument("--envs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--size", type=int, default=128, help="camera height and width")
    p.add_argument("--steps", type=int, default=80, help="env steps per sub-env per round")
    p.add_argument("--chunk", type=int, default=8, help="actions per chunk on the adapter path")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--video", action="store_true", help="also time adapter rounds that record a video")
    args = p.parse_args()
    configure_process_env()
    case = CASES[args.sim]
    print(f"sim={args.sim} size={args.size} chunk={args.chunk} steps/round={args.steps} rounds={args.rounds}")
    head = f"{'N':>3} {'raw steps/s':>12} {'adapter steps/s':>16} {'ratio':>7}"
    print(head + (f" {'with video':>11} {'ratio':>7}" if args.video else ""))
    with tempfile.TemporaryDirectory() as video_dir:
        for n in args.envs:
            raw, adapter, video = measure(case, args, n, video_dir)
            line = f"{n:>3} {raw:>12.1f} {adapter:>16.1f} {adapter / raw:>7.3f}"
            if video is not None:
                line += f" {video:>11.1f} {video / raw:>7.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
