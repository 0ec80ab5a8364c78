"""Pipelined rollout: wall time of a rollout epoch with 2 pipeline stages vs 1.

Real pieces: 1 EnvWorker (ManiSkill PickCube-v1, CPU sim, one process per sub-env, 64 px) and
1 RolloutWorker (tiny OpenVLA-OFT) as Ray actors on separate slots, talking through the
shared-memory channel. The tiny policy costs ~30 ms per batch while a chunk of 8 CPU-sim steps
costs ~1 s, so overlap could not show; the benchmark therefore runs the *real* policy forward K
times per batch, with K calibrated so that inference time ~= env time per chunk step (the
regime a 7B policy on a GPU is in). Stages=1 steps all sub-envs, then infers; stages=2 steps
half the sub-envs while the other half is inferred.

By default the env worker and its simulator processes are pinned to core 0 and the rollout
worker to core 1, the resource model of a real deployment (simulators on their CPUs, the
policy on its accelerator). Unpinned on a 2-core box, the sims and the policy compete for
the same two cores, so overlap cannot save time (see docs/BENCHMARKS.md).

    python benchmarks/pipeline.py [--envs 2] [--chunk-steps 4] [--epochs 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import embodied_rl  # noqa: F401  (torchvision shim first)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.config.schema.model import ModelConfig
from embodied_rl.models.cli import make_model_main
from embodied_rl.runtime.channel import Channel
from embodied_rl.runtime.worker_group import RayCluster, WorkerGroup
from embodied_rl.runtime_env import configure_process_env
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.messages import ChannelWiring, SamplingSpec
from embodied_rl.workers.rollout_worker import RolloutWorker


def pin_process(core: int) -> None:
    """Pin every thread of this process (and so its future children) to one CPU core."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


class PinnedEnvWorker(EnvWorker):
    def pin(self, core: int) -> None:
        pin_process(core)  # before the first interact: the sim processes inherit it


class CalibratedRolloutWorker(RolloutWorker):
    """RolloutWorker whose policy costs `repeats` extra single-sample forwards per sample.

    The cost then grows with the batch like a large model's does (the tiny model's cost is
    flat in the batch size, which no real VLA's is). Benchmark only."""

    def pin(self, core: int) -> None:
        pin_process(core)

    def set_policy_repeats(self, repeats: int) -> None:
        predict = type(self.policy).predict.__get__(self.policy)

        def repeated(inputs, **kwargs):
            batch = next(iter(inputs.values())).shape[0]
            for i in range(batch):
                row = {k: v[i : i + 1] for k, v in inputs.items()}
                for _ in range(repeats):
                    predict(row, **kwargs)
            return predict(inputs, **kwargs)

        self.policy.predict = repeated


def env_cfg(n: int, size: int) -> EnvConfig:
    return EnvConfig(env_type="maniskill", task_description="pick up the red cube", total_num_envs=n,
                     max_episode_steps=400, auto_reset=True,
                     init_params={"id": "PickCube-v1", "camera_heights": size, "camera_widths": size})


def build(cluster, placement, model_cfg, args, stages: int):
    channel = Channel.create(f"pipeline{stages}", queue_size=2)
    envs = WorkerGroup(PinnedEnvWorker, cluster, placement, "env", kwargs={
        "env_cfgs": {"train": env_cfg(args.envs, args.size)}, "wiring": ChannelWiring.single(channel), "num_rollout_workers": 1,
        "pipeline_stage_num": stages})
    rollouts = WorkerGroup(CalibratedRolloutWorker, cluster, placement, "rollout", kwargs={
        "model_cfg": model_cfg, "wiring": ChannelWiring.single(channel), "num_env_workers": 1, "pipeline_stage_num": stages,
        "sampling": {"train": SamplingSpec()}, "compute_values": True})
    if args.pin:
        envs.run("pin", 0)
        rollouts.run("pin", 1)
    return channel, envs, rollouts


def epoch(envs, rollouts, steps: int) -> tuple[float, dict, dict]:
    t0 = time.perf_counter()
    env_refs, roll_refs = envs.call("interact", steps), rollouts.call("generate", steps)
    env_m = envs.gather(env_refs)[0]
    _, roll_m = rollouts.gather(roll_refs)[0]
    return time.perf_counter() - t0, env_m, roll_m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=2, help="sub-envs of the env worker (one sim process each)")
    ap.add_argument("--chunk-steps", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3, help="timed rollout epochs per setting")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=0, help="policy forwards per batch; 0 = calibrate")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the env worker (+ its sims) to core 0 and the rollout worker to core 1")
    args = ap.parse_args()
    configure_process_env()
    cluster = RayCluster(num_cpu_slots=2)
    placement = cluster.placement({"env": "0", "rollout": "1"})
    model_dir = tempfile.mkdtemp(prefix="tiny-oft-")
    make_model_main(["tiny", model_dir + "/m", "--image-size", str(args.size)])
    model_cfg = ModelConfig(model_path=model_dir + "/m", add_value_head=True)
    walls: dict[int, list[float]] = {}
    repeats = args.repeats
    for stages in (1, 2):
        channel, envs, rollouts = build(cluster, placement, model_cfg, args, stages)
        _, env_m, roll_m = epoch(envs, rollouts, 1)  # warm-up: sim start, first forward
        if repeats == 0:  # calibrate on the 1-stage setting (all sub-envs, full batches)
            _, env_m, roll_m = epoch(envs, rollouts, 2)
            per_forward = roll_m["time/rollout/infer_s"] / 3  # 2 chunk steps + the last-value forward
            repeats = max(1, round(env_m["time/env/step_s"] / 2 / per_forward / args.envs))
            for _ in range(2):  # refine: the first estimate misses per-call overheads
                rollouts.run("set_policy_repeats", repeats)
                _, env_m, roll_m = epoch(envs, rollouts, 2)
                repeats = max(1, round(repeats * env_m["time/env/step_s"] / roll_m["time/rollout/infer_s"]))
            print(f"calibration: {repeats} extra forwards per sample (last: env {env_m['time/env/step_s']:.2f} s, "
                  f"inference {roll_m['time/rollout/infer_s']:.2f} s per 2 chunk steps)")
        rollouts.run("set_policy_repeats", repeats)
        walls[stages] = []
        for _ in range(args.epochs):
            wall, env_m, roll_m = epoch(envs, rollouts, args.chunk_steps)
            walls[stages].append(wall)
            print(f"stages={stages}: wall {wall:6.2f} s  env stepping {env_m['time/env/step_s']:6.2f} s  "
                  f"env waiting {env_m['time/env/wait_actions_s']:6.2f} s  inference {roll_m['time/rollout/infer_s']:6.2f} s",
                  flush=True)
        envs.run("close")
        envs.shutdown()
        rollouts.shutdown()
        channel.shutdown()
    cluster.shutdown()
    shutil.rmtree(model_dir)
    t1, t2 = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"pinned: {args.pin}; extra forwards per sample: {repeats}")
    print(f"median wall per epoch ({args.envs} envs, {args.chunk_steps} chunk steps): 1 stage {t1:.2f} s, 2 stages {t2:.2f} s")
    print(f"ratio 2 stages / 1 stage: {t2 / t1:.3f}  (goal <= 0.55)")


if __name__ == "__main__":
    main()
