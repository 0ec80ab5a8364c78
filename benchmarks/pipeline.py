"""Pipelined rollout: wall time of a rollout epoch with 2 pipeline stages vs 1.

Real pieces: per setting 1 EnvWorker (ManiSkill PickCube-v1, CPU sim, one process per sub-env,
64 px) and 1 RolloutWorker (tiny OpenVLA-OFT, greedy, with values) as Ray actors, talking
through the shared-memory channel. The tiny policy costs ~30 ms per batch while a chunk of 8
CPU-sim steps costs ~0.5 s, so overlap could not show; the benchmark therefore runs the *real*
policy forward K extra times per sample, with K calibrated so that inference time ~= env time
(the regime a 7B policy on a GPU is in). Stages=1 steps all sub-envs, then infers; stages=2
steps half the sub-envs while the other half is inferred.

One epoch is exactly one episode (max_episode_steps = chunk steps x chunk length), so every
epoch simulates the same kind of work; both settings live side by side and their epochs
alternate, so the drifts of a shared machine hit both alike.

By default the env workers and their simulator processes are pinned to core 0 and the rollout
workers to core 1, the resource model of a real deployment (simulators on their CPUs, the
policy on its accelerator). Unpinned on a 2-core box, the sims and the policy compete for
the same two cores, so overlap cannot save time (see docs/BENCHMARKS.md).

`--cost-model device` keeps the real forward but pads each call with an idle wait to a
calibrated latency per sample (again ~= env time): the rollout process then uses its core the
way it does with the policy on a GPU (launch, then wait for the device), which separates the
schedule's own efficiency from the contention of two busy cores on this box.

    python benchmarks/pipeline.py [--envs 2] [--chunk-steps 10] [--epochs 3] [--cost-model cpu|device]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import embodied_rl  # noqa: F401  (torchvision shim first)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.worker_group import RayCluster, WorkerGroup
from embodied_rl.models.create import create_model
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.process_env import configure_process_env
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.protocol import ChannelWiring, SamplingSpec
from embodied_rl.workers.rollout_worker import RolloutWorker


def pin_process(core: int) -> None:
    """Pin every thread of this process (and so its future children) to one CPU core."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


def confine_support_processes(core: int) -> list[str]:
    """Move Ray's own processes (GCS, raylet, dashboard, channel queue actors, idle workers) and
    this driver to `core`, so that the simulators' core runs only the env workers and their sims,
    as on a node whose other CPUs host the support processes. Returns what was moved."""
    moved = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if os.sched_getaffinity(int(pid)) != set(range(os.cpu_count() or 1)):
                continue  # already pinned: an env or rollout worker, or a simulator
            # Ray's binaries and scripts live under .../ray/; its workers rename themselves
            # "ray::<Class>". Only this user's: as root, other users' processes would move too.
            is_ray = cmd.startswith("ray::") or "/ray/" in cmd
            if int(pid) != os.getpid() and not (is_ray and os.stat(f"/proc/{pid}").st_uid == os.getuid()):
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), {core})
            moved.append(cmd.split()[0] if cmd else pid)
        except (OSError, ProcessLookupError):
            continue  # exited meanwhile
    return moved


class PinnedEnvWorker(EnvWorker):
    def pin(self, core: int) -> None:
        pin_process(core)  # before the first interact: the sim processes inherit it


class CalibratedRolloutWorker(RolloutWorker):
    """RolloutWorker whose policy costs extra inference time per sample. Benchmark only.

    The cost grows with the batch like a large model's does (the tiny model's cost is flat in
    the batch size, which no real VLA's is). Two cost models:
      cpu:    `repeats` extra real single-sample forwards per sample, on this process's core, so
              inference competes with the simulators for caches and memory bandwidth;
      device: the real forward, then an idle wait so that the call lasts `seconds_per_sample` x
              batch: a policy on its own accelerator, where the rollout process launches the
              work and waits for the device."""

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

    def set_device_latency(self, seconds_per_sample: float) -> None:
        predict = type(self.policy).predict.__get__(self.policy)

        def on_device(inputs, **kwargs):
            t0 = time.perf_counter()
            out = predict(inputs, **kwargs)
            batch = next(iter(inputs.values())).shape[0]
            time.sleep(max(0.0, batch * seconds_per_sample - (time.perf_counter() - t0)))
            return out

        self.policy.predict = on_device


CHUNK = OpenVLAOFTConfig().num_action_chunks  # actions per chunk of the tiny preset


def env_cfg(n: int, size: int, chunk_steps: int) -> EnvConfig:
    # One epoch = exactly one episode (auto-reset at its end), so every timed epoch of either
    # setting simulates the same workload: episode positions, resets and contacts line up.
    return EnvConfig(env_type="maniskill", task_description="pick up the red cube", total_num_envs=n,
                     max_episode_steps=chunk_steps * CHUNK, auto_reset=True,
                     init_params={"id": "PickCube-v1", "camera_heights": size, "camera_widths": size})


def build(cluster, model_cfg, args, stages: int):
    """Env + rollout worker of one setting; slots 0/1 (stages 1) or 2/3 (stages 2), pinned to cores 0/1."""
    placement = cluster.placement({"env": str(2 * (stages - 1)), "rollout": str(2 * (stages - 1) + 1)})
    channel = Channel.create(f"pipeline{stages}", queue_size=2)
    envs = WorkerGroup(PinnedEnvWorker, cluster, placement, "env", kwargs={
        "env_cfgs": {"train": env_cfg(args.envs, args.size, args.chunk_steps)}, "wiring": ChannelWiring.single(channel),
        "num_rollout_workers": 1, "pipeline_stage_num": stages})
    rollouts = WorkerGroup(CalibratedRolloutWorker, cluster, placement, "rollout", kwargs={
        "model_cfg": model_cfg, "wiring": ChannelWiring.single(channel), "num_env_workers": 1, "pipeline_stage_num": stages,
        "sampling": {"train": SamplingSpec(do_sample=False)}, "compute_values": True})
    if args.pin:
        envs.pin(0).wait()
        rollouts.pin(1).wait()
    return channel, envs, rollouts


def epoch(envs, rollouts, steps: int) -> tuple[float, dict, dict]:
    t0 = time.perf_counter()
    env_refs, roll_refs = envs.interact(steps), rollouts.generate(steps)
    env_m = env_refs.wait()[0]
    _, roll_m = roll_refs.wait()[0]
    return time.perf_counter() - t0, env_m, roll_m


def calibrate(envs, rollouts, args) -> int:
    """Extra forwards per sample that make inference ~= env stepping, on 1-stage epochs."""
    _, env_m, roll_m = epoch(envs, rollouts, args.chunk_steps)
    per_forward = roll_m["time/rollout/infer_s"] / (args.chunk_steps + 1)  # + the last-value forward
    repeats = max(1, round(env_m["time/env/step_s"] / args.chunk_steps / per_forward / args.envs))
    estimates = []
    for _ in range(3):  # refine (the first estimate misses per-call overheads); median: sims are noisy
        rollouts.set_policy_repeats(repeats).wait()
        _, env_m, roll_m = epoch(envs, rollouts, args.chunk_steps)
        estimates.append(max(1, round(repeats * env_m["time/env/step_s"] / roll_m["time/rollout/infer_s"])))
        repeats = estimates[-1]
    repeats = round(statistics.median(estimates))
    print(f"calibration: {repeats} extra forwards per sample (estimates {estimates})", flush=True)
    return repeats


def calibrate_device(envs, rollouts, args) -> float:
    """Device latency per sample that makes inference ~= env stepping (median of 3 epochs)."""
    per_sample = []
    for _ in range(3):
        _, env_m, _ = epoch(envs, rollouts, args.chunk_steps)
        per_sample.append(env_m["time/env/step_s"] / args.chunk_steps / args.envs)
    latency = statistics.median(per_sample)
    print(f"calibration: device latency {latency * 1e3:.1f} ms per sample (estimates "
          f"{', '.join(f'{x * 1e3:.1f}' for x in per_sample)})", flush=True)
    return latency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=2, help="sub-envs of the env worker (one sim process each)")
    ap.add_argument("--chunk-steps", type=int, default=10, help="chunk steps per epoch (= one episode)")
    ap.add_argument("--epochs", type=int, default=3, help="timed rollout epochs per setting")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=0, help="cpu cost model: extra forwards per sample; 0 = calibrate")
    ap.add_argument("--cost-model", choices=("cpu", "device"), default="cpu",
                    help="cpu: extra real forwards on the rollout core; device: the same cost as an idle wait "
                         "(a policy on its own accelerator)")
    ap.add_argument("--device-ms", type=float, default=0.0,
                    help="device cost model: latency per sample in ms; 0 = calibrate to env stepping")
    ap.add_argument("--no-confine", dest="confine", action="store_false",
                    help="with pinning: leave Ray's own processes and the driver free to run on the simulators' core")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the env workers (+ their sims) to core 0 and the rollout workers to core 1")
    args = ap.parse_args()
    configure_process_env()
    cluster = RayCluster(num_cpu_slots=4)  # 2 settings x (env, rollout); idle ones cost no CPU
    model_dir = tempfile.mkdtemp(prefix="tiny-oft-")
    create_model("tiny", model_dir + "/m", image_size=args.size)
    model_cfg = OpenVLAOFTConfig(model_path=model_dir + "/m", add_value_head=True)
    settings = {stages: build(cluster, model_cfg, args, stages) for stages in (1, 2)}
    for stages, (_, envs, rollouts) in settings.items():
        epoch(envs, rollouts, args.chunk_steps)  # warm-up: sim start, first forward
    if args.pin and args.confine:
        moved = confine_support_processes(1)
        print(f"moved {len(moved)} support processes to core 1", flush=True)
    if args.cost_model == "device":
        cost = ("set_device_latency", args.device_ms / 1e3 if args.device_ms else calibrate_device(*settings[1][1:], args))
    else:
        cost = ("set_policy_repeats", args.repeats or calibrate(*settings[1][1:], args))
    walls: dict[int, list[float]] = {1: [], 2: []}
    method, value = cost
    for _, _, rollouts in settings.values():
        getattr(rollouts, method)(value).wait()
    # Epochs of the two settings alternate, so slow drifts of this shared machine hit both alike.
    for _ in range(args.epochs):
        for stages, (_, envs, rollouts) in settings.items():
            wall, env_m, roll_m = epoch(envs, rollouts, args.chunk_steps)
            walls[stages].append(wall)
            print(f"stages={stages}: wall {wall:6.2f} s  env stepping {env_m['time/env/step_s']:6.2f} s  "
                  f"env waiting {env_m['time/env/wait_actions_s']:6.2f} s  inference {roll_m['time/rollout/infer_s']:6.2f} s",
                  flush=True)
    for channel, envs, rollouts in settings.values():
        envs.close().wait()
        envs.shutdown()
        rollouts.shutdown()
        channel.shutdown()
    cluster.shutdown()
    shutil.rmtree(model_dir)
    t1, t2 = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"pinned: {args.pin}; cost model: {args.cost_model} ({cost[0]}={cost[1]})")
    print(f"median wall per epoch ({args.envs} envs, {args.chunk_steps} chunk steps): 1 stage {t1:.2f} s, 2 stages {t2:.2f} s")
    print(f"ratio 2 stages / 1 stage: {t2 / t1:.3f}  (goal <= 0.55)")


if __name__ == "__main__":
    main()
