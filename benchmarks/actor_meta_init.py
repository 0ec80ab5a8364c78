"""Actor set-up memory: each rank building the whole fp32 policy and sharding it, vs building on
the meta device and loading its shards (fsdp.build_sharded_policy, what ActorWorker.setup runs).

2 ranks over gloo (one process each, spawned fresh per build), the `small` preset (~46M
parameters, full fine-tuning and a value head). Per rank: peak RSS during the build minus the
RSS before it (the process group, the imports and the tokenizer are already there, the freed
heap trimmed; /proc/self/clear_refs resets the peak), and the RSS once built. Printed per rank and summed, with the ratio eager / meta.

    python benchmarks/actor_meta_init.py [--world 2] [--preset small]
"""
from __future__ import annotations

import argparse
import ctypes
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

from embodied_rl.config.schema import RootConfig
from embodied_rl.config.schema.model import model_config
from embodied_rl.models import build_policy
from embodied_rl.models.create import create_model
from embodied_rl.models.registry import policy_class
from embodied_rl.workers.actor import fsdp


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _trim() -> None:
    """Hand freed heap back to the system, so RSS shows what is held."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _rank(rank: int, world: int, port: int, path: str, mode: str, out: dict) -> None:
    torch.set_num_threads(1)
    cfg = RootConfig()
    a = cfg.actor
    cfg.runner.seed = a.seed = 7  # set, as the loader resolves the interpolation
    a.model.model_path, a.model.add_value_head, a.model.value_type = path, True, "chunk_level"
    a.fsdp_config.mixed_precision.param_dtype = a.fsdp_config.mixed_precision.reduce_dtype = "fp32"
    device = torch.device("cpu")
    fsdp.init_process_group(rank, world, "127.0.0.1", port, device)
    # Imports (transformers, timm, peft) and the tokenizer cost the same either way: paid before measuring.
    policy_class(a.model.model_type).skeleton(path, a.model, device=device)
    _trim()
    before = _kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    if mode == "eager":  # the set-up before meta construction
        torch.manual_seed(a.seed)
        policy = build_policy(a.model, device=device, dtype=torch.float32, init_seed=a.seed, warn_untrained_value_head=False)
        policy = fsdp.apply_fsdp2(policy, a.fsdp_config, world, device)
    else:
        policy = fsdp.build_sharded_policy(a.model, a.fsdp_config, rank=rank, world_size=world, device=device,
                                           init_seed=a.seed, warn_untrained_value_head=False)
    torch.distributed.barrier()
    _trim()
    out[rank] = ((_kib("VmHWM") - before) / 1024, (_kib("VmRSS") - before) / 1024)
    del policy
    torch.distributed.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--preset", default="small", help="model preset (tiny: a smoke run of the code path)")
    args = ap.parse_args()
    path = create_model(args.preset, Path(tempfile.mkdtemp(prefix="meta_bench_")) / args.preset, image_size=64, seed=0).path
    n_params = sum(t.numel() for t in build_policy(model_config("openvla_oft", model_path=str(path))).parameters())
    results = {}
    with mp.Manager() as manager:
        for mode in ("eager", "meta"):
            out = manager.dict()
            mp.start_processes(_rank, args=(args.world, fsdp.free_port(), str(path), mode, out), nprocs=args.world,
                               start_method="spawn")
            results[mode] = dict(out)
    print(f"{args.preset} preset: {n_params / 1e6:.1f}M parameters ({n_params * 4 / 2**20:.0f} MiB in fp32), {args.world} ranks over gloo")
    for mode, ranks in results.items():
        per = ", ".join(f"rank {r}: peak +{p:6.1f} MiB, held +{h:6.1f} MiB" for r, (p, h) in sorted(ranks.items()))
        print(f"  {mode:5s} {per}; all ranks peak +{sum(p for p, _ in ranks.values()):6.1f} MiB")
    peak = {mode: sum(p for p, _ in ranks.values()) for mode, ranks in results.items()}
    worst = {mode: max(p for p, _ in ranks.values()) for mode, ranks in results.items()}
    others = {mode: max((p for r, (p, _) in ranks.items() if r), default=0.0) for mode, ranks in results.items()}
    print(f"peak RSS of the set-up, eager / meta: all ranks {peak['eager'] / peak['meta']:.2f}x, "
          f"worst rank {worst['eager'] / worst['meta']:.2f}x, ranks other than 0 {others['eager'] / max(others['meta'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
