"""Full rollout loop overhead: env frames/s through EnvWorker <-> channel <-> RolloutWorker
(trivial policy: zero actions, no model) vs raw simulator stepping of the same sub-envs.

Three phases, run one after the other so at most 2 simulator processes exist at a time:
  raw   `benchmarks/overhead.py`'s ManiSkill stepper (gymnasium AsyncVectorEnv over ManiSkill's
        CPUGymWrapper, one process per sub-env), no resets;
  env   the env layer in-process (ChunkedVectorEnv over the subprocess pool), zero actions,
        one reset per epoch like the loop;
  loop  the real env worker and rollout worker loop over Ray and the shared-memory channel,
        only the policy forward replaced by zero actions.
loop / env isolates the cost of the workers and channels; env / raw is the env layer's.
Kept in its own file because overhead.py's case registry is per simulator (env layer only).

    python benchmarks/overhead_rollout.py [--task PickCube-v1] [--envs 2] [--chunk-steps 20] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch

import embodied_rl  # noqa: F401  (torchvision shim first)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.worker_group import RayCluster, WorkerGroup
from embodied_rl.envs import make_env
from embodied_rl.models.create import create_model
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.process_env import configure_process_env
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.protocol import ChannelWiring, SamplingSpec
from embodied_rl.workers.rollout_worker import RolloutWorker

C, A = 8, 7


class TrivialPolicyRolloutWorker(RolloutWorker):
    """The real rollout loop with the policy forward replaced by zero actions (benchmark only)."""

    def _inputs(self, obs):
        return {"n": obs.num_envs}

    def trivial(self) -> None:
        self.policy.predict = lambda inputs, **kw: SimpleNamespace(actions=torch.zeros(inputs["n"], C, A))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--chunk-steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--task", default="PickCube-v1", help="ManiSkill task id (PushCube-v1: the main job's task)")
    args = ap.parse_args()
    configure_process_env()
    # Ray starts workers with OMP_NUM_THREADS=1 and their simulator processes inherit it; give
    # the raw and in-process phases the same setting so only the runtime differs.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import overhead  # benchmarks/overhead.py (this script's directory is on sys.path)

    env_cfg = EnvConfig(env_type="maniskill", task_description="pick up the red cube", total_num_envs=args.envs,
                        max_episode_steps=(args.chunk_steps + 1) * C, auto_reset=True,
                        init_params={"id": args.task, "camera_heights": args.size, "camera_widths": args.size})
    steps = args.chunk_steps * C
    times = {"raw": measure_raw(overhead, args, steps), "env": measure_env(env_cfg, args), "loop": measure_loop(env_cfg, args)}
    frames = args.rounds * steps * args.envs
    print(f"{args.task}, {args.envs} envs, {args.size}px, {args.chunk_steps} chunk steps x {args.rounds} rounds (total per phase)")
    for name, t in times.items():
        print(f"  {name:5s} {frames / t:8.1f} frames/s")
    print(f"ratio full loop / raw simulator:         {times['raw'] / times['loop']:.3f}  (goal >= 0.95)")
    print(f"ratio full loop / env layer in-process:  {times['env'] / times['loop']:.3f}  (the workers' and channel's own cost)")
    print(f"ratio env layer / raw simulator:         {times['raw'] / times['env']:.3f}  (benchmarks/overhead.py's quantity)")


def measure_raw(overhead, args, steps: int) -> float:
    raw = overhead._maniskill_raw(argparse.Namespace(task=args.task, size=args.size), args.envs)
    raw.step(C)
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        raw.step(steps)
    t = time.perf_counter() - t0
    raw.close()
    return t


def measure_env(env_cfg: EnvConfig, args) -> float:
    """ChunkedVectorEnv in this process, zero actions, one reset per epoch like the loop."""
    env = make_env(env_cfg, args.envs)
    zeros = np.zeros((args.envs, C, A), np.float32)
    env.reset()
    env.chunk_step(zeros)
    t = 0.0
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        env.reset()
        for _ in range(args.chunk_steps):
            env.chunk_step(zeros)
        t += time.perf_counter() - t0
    env.close()
    return t


def measure_loop(env_cfg: EnvConfig, args) -> float:
    cluster = RayCluster(num_cpu_slots=2)
    placement = cluster.placement({"env": "0", "rollout": "1"})
    model_dir = tempfile.mkdtemp(prefix="tiny-oft-") + "/m"
    create_model("tiny", model_dir, image_size=args.size)
    channel = Channel.create("overhead", queue_size=2)
    envs = WorkerGroup(EnvWorker, cluster, placement, "env", kwargs={
        "env_cfgs": {"eval": env_cfg}, "wiring": ChannelWiring.single(channel), "num_rollout_workers": 1, "pipeline_stage_num": 1})
    rollouts = WorkerGroup(TrivialPolicyRolloutWorker, cluster, placement, "rollout", kwargs={
        "model_cfg": OpenVLAOFTConfig(model_path=model_dir), "wiring": ChannelWiring.single(channel), "num_env_workers": 1, "pipeline_stage_num": 1,
        "sampling": {"greedy": SamplingSpec(do_sample=False)}, "compute_values": False})
    rollouts.trivial().wait()

    def epoch(n: int) -> float:
        t0 = time.perf_counter()
        refs = envs.interact(n, "eval"), rollouts.generate(n, "eval")
        refs[0].wait()
        refs[1].wait()
        return time.perf_counter() - t0

    epoch(1)  # warm-up (sim start-up)
    t = sum(epoch(args.chunk_steps) for _ in range(args.rounds))
    envs.close().wait()
    for g in (envs, rollouts):
        g.shutdown()
    channel.shutdown()
    cluster.shutdown()
    shutil.rmtree(os.path.dirname(model_dir))
    return t


if __name__ == "__main__":
    main()
