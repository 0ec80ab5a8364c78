"""The memory plan's forecast for an actor rank against the memory it takes, on this CPU machine.

Per case (preset, full or LoRA, compute dtype) and allocator, one fresh process (spawned, one
rank over gloo) sets up ActorWorker on an OpenVLA-OFT checkpoint and runs `--steps` PPO training
steps on a rollout batch the policy made (tests/rollout_batch.py: 16 samples, micro-batches of 4).
Measured: the peak RSS from just before the set-up to the end of the last step, minus the RSS
before it (imports, process group and the rollout batch already there; freed heap trimmed;
/proc/self/clear_refs resets the peak). From the second step on, the optimizer state exists
through the whole step, so the peak is the steady state's. Forecast: the plan's terms for that
rank on a CPU node (memory/plan.py actor_terms: fp32 master weights, gradients, Adam state,
gathered compute-dtype copy; the CPU heap's retention) plus the counted activations of one
micro-batch (models/activations.py).

Allocators: `default` is glibc as every process runs it; `returning` sets MALLOC_MMAP_THRESHOLD_
so that every tensor larger than 128 KiB is mapped on its own and unmapped when freed: the RSS
then follows the live tensors, which the plan's terms without the heap retention count.
The ratio measured / forecast is printed per case; the plan's goal is within 15 %.

    python benchmarks/memory_forecast.py [--presets tiny,small] [--cases full-fp32,lora-fp32,full-bf16,lora-bf16] [--steps 3]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from embodied_rl.config.schema import RootConfig
from embodied_rl.memory.plan import actor_terms, cpu_heap_retention, rank0_setup_bytes
from embodied_rl.models.activations import count_activations
from embodied_rl.models.create import create_model
from embodied_rl.models.registry import PRECISION_DTYPES, policy_class
from embodied_rl.types import EnvObservation

REPO = Path(__file__).resolve().parents[1]
MICRO, GLOBAL = 4, 16


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _trim() -> None:
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def config(path: str, lora: bool, dtype: str) -> RootConfig:
    cfg = RootConfig()
    a = cfg.actor
    cfg.runner.seed = a.seed = 7
    cfg.runner.max_steps = 5
    a.model.model_path = cfg.rollout.model.model_path = path
    a.model.add_value_head, a.model.value_type = True, "chunk_level"
    a.model.is_lora, a.model.lora_rank = lora, 8
    a.fsdp_config.mixed_precision.param_dtype = dtype
    a.global_batch_size, a.micro_batch_size = GLOBAL, MICRO
    return cfg


def forecast(cfg: RootConfig, image_size: int, world: int) -> dict[str, int]:
    m = cfg.actor.model
    terms = actor_terms(m.parameter_counts(), world=world, strategy=cfg.actor.fsdp_config.sharding_strategy,
                        param_dtype=cfg.actor.fsdp_config.mixed_precision.param_dtype)
    obs = EnvObservation(main_images=np.zeros((MICRO, image_size, image_size, 3), dtype=np.uint8),
                         states=np.zeros((MICRO, 8), dtype=np.float32), task_descriptions=["pick up the cube"] * MICRO)
    dtype = PRECISION_DTYPES[cfg.actor.fsdp_config.mixed_precision.param_dtype]
    skeleton = policy_class(m.model_type).skeleton(m.model_path, m, device="cpu", dtype=dtype)
    terms["activations"] = count_activations(skeleton, obs).peak(m.gradient_checkpointing)
    return terms


#: The allocator settings measured: name -> (environment of the measured process, whether the
#: plan's CPU heap term applies).
ALLOCATORS = {"default": ({}, True), "returning": ({"MALLOC_MMAP_THRESHOLD_": "131072"}, False)}


def _measure(rank: int, world: int, port: int, path: str, lora: bool, dtype: str, steps: int, out: dict) -> None:
    sys.path.insert(0, str(REPO))  # the tests package: its rollout batch is what the actor tests train on
    from embodied_rl.workers.actor.worker import ActorWorker
    from tests.rollout_batch import make_rollout_batch

    torch.set_num_threads(1)
    cfg = config(path, lora, dtype)
    batch = make_rollout_batch(cfg)
    worker = ActorWorker(cfg, rank, world)
    _trim()
    before = _kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    worker.setup("127.0.0.1", port)
    for _ in range(steps):
        worker.train_step(batch)
    out[rank] = (_kib("VmHWM") - before) * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--cases", default="full-fp32,lora-fp32,full-bf16,lora-bf16")
    ap.add_argument("--steps", type=int, default=3, help="training steps measured (the peak from the second on is the steady state's)")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS), help=f"of {', '.join(ALLOCATORS)}")
    ap.add_argument("--ranks", default="1", help="actor ranks (FSDP world sizes) to measure, e.g. 1,2: the largest rank's peak counts")
    args = ap.parse_args()
    allocators = args.allocators.split(",")
    work = Path(tempfile.mkdtemp(prefix="memory_forecast_"))
    print("| preset | case | ranks | forecast MiB per rank: live tensors (terms); cpu_heap | "
          + " | ".join(f"{a}: measured MiB, ratio to the forecast{' with cpu_heap' * ALLOCATORS[a][1]}" for a in allocators) + " |")
    print("|---|---|---|---|" + "---|" * len(allocators))
    for preset in args.presets.split(","):
        path = str(create_model(preset, work / preset, image_size=64, seed=0).path)
        for case in args.cases.split(","):
            kind, dtype = case.split("-")
            for world in map(int, args.ranks.split(",")):
                cfg = config(path, kind == "lora", dtype)
                terms = forecast(cfg, 64, world)
                live = sum(terms.values())
                heap = cpu_heap_retention(terms)
                setup = rank0_setup_bytes(cfg.actor.model.parameter_counts())  # the measured rank is rank 0, as the plan counts it
                cells = []
                for name in allocators:
                    env, with_heap = ALLOCATORS[name]
                    peak = _spawn(world, path, kind == "lora", dtype, args.steps, env)
                    cells.append(f"{peak / 2**20:.1f}, **{peak / max(live + heap * with_heap, setup):.2f}**")
                shown = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in terms.items())
                print(f"| {preset} | {case} | {world} | {live / 2**20:.1f} ({shown}); cpu_heap {heap / 2**20:.1f} | "
                      + " | ".join(cells) + " |", flush=True)


def _spawn(world: int, path: str, lora: bool, dtype: str, steps: int, env: dict[str, str]) -> int:
    """The largest rank's peak bytes, `world` measuring processes started with `env` added to this
    one's environment (glibc reads its tunables when a process starts)."""
    from embodied_rl.workers.actor import fsdp

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with mp.Manager() as manager:
            out = manager.dict()
            mp.start_processes(_measure, args=(world, fsdp.free_port(), path, lora, dtype, steps, out), nprocs=world,
                               start_method="spawn")
            return max(int(out[r]) for r in range(world))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    main()
