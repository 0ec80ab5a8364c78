"""The actor's AdamW step on FSDP2-sharded parameters: torch's per-parameter loop (what
workers/actor/optim.build_optimizer gets: torch's default for CPU tensors and DTensors) against the
fused step and the multi-tensor (foreach) one, on the same sharded policy with the same gradients,
in one process. Not adopted: a different implementation changes the update's rounding, and so every
recorded training result, for a small share of a PPO step (16 optimizer steps in a main-job update).

One rank over gloo, the policy as ActorWorker builds it (fp32 trainable weights and a value head).
Each round times `--steps` optimizer steps of each kind, alternating, after a warm-up step; the
ratio is of the medians over rounds.

    python benchmarks/optimizer_step.py [--preset tiny] [--rounds 5] [--steps 20]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from embodied_rl.config.schema import RootConfig
from embodied_rl.models.create import create_model
from embodied_rl.workers.actor import fsdp
from embodied_rl.workers.actor.optim import build_optimizer


def _seconds_per_step(optimizer: torch.optim.Optimizer, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny", help="model preset (tiny: the CPU runs' policy; small: ~46M parameters)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps of each kind per round")
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = create_model(args.preset, Path(tempfile.mkdtemp(prefix="optim_bench_")) / args.preset, image_size=64, seed=0).path
    cfg = RootConfig()
    a = cfg.actor
    a.model.model_path, a.model.add_value_head, a.model.value_type = str(path), True, "chunk_level"
    a.fsdp_config.mixed_precision.param_dtype = a.fsdp_config.mixed_precision.reduce_dtype = "fp32"
    device = torch.device("cpu")
    fsdp.init_process_group(0, 1, "127.0.0.1", fsdp.free_port(), device)
    try:
        policy = fsdp.build_sharded_policy(a.model, a.fsdp_config, rank=0, world_size=1, device=device, init_seed=7,
                                           warn_untrained_value_head=False)
        params = [p for p in policy.parameters() if p.requires_grad]
        gen = torch.Generator().manual_seed(0)
        for p in params:  # the same gradients for every kind: a step's values do not change its cost
            p.grad = torch.distributed.tensor.DTensor.from_local(
                torch.randn(p.to_local().shape, generator=gen) * 1e-3, p.device_mesh, p.placements)
        # Each kind is build_optimizer's AdamW with only its implementation flag changed.
        kinds = {kind: build_optimizer(policy, a.optim) for kind in ("loop", "foreach", "fused")}
        assert not any(g["foreach"] or g["fused"] for g in kinds["loop"].param_groups), "build_optimizer now asks for another step"
        for kind, optimizer in kinds.items():
            for g in optimizer.param_groups:
                g["foreach"], g["fused"] = kind == "foreach", kind == "fused"
        for optimizer in kinds.values():
            optimizer.step()  # state allocated before timing
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind, optimizer in kinds.items():
                times[kind].append(_seconds_per_step(optimizer, args.steps))
    finally:
        torch.distributed.destroy_process_group()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.preset} preset: {len(params)} trainable tensors, {sum(p.numel() for p in params) / 1e6:.2f}M parameters, "
          f"1 rank over gloo, 1 thread")
    for kind, values in times.items():
        print(f"  {kind:8s} ms per step, per round: {', '.join(f'{v * 1e3:.2f}' for v in values)}; median {med[kind] * 1e3:.2f}")
    print(f"optimizer step, per-parameter loop / fused: {med['loop'] / med['fused']:.2f}x; foreach / fused: "
          f"{med['foreach'] / med['fused']:.2f}x")


if __name__ == "__main__":
    main()
