"""vLLM rollout under LoRA: what the engine's host process holds beside the engine, and what a sync adds.

Under LoRA the vLLM backend folds the actor's adapters into the engine's weights at every sync,
which needs the base weights of the adapted layers. The host policy keeps only the adapters and
heads over a core left on the meta device, and the fold reads each adapted layer's base weight
from the checkpoint (memory-mapped) as it goes. The baseline, measured in the same run, is what a
host holding the whole policy would hold: `build_policy` of the same checkpoint and config on the
CPU (the route the backend took before).

Each measurement runs in its own fresh process (spawned), on the `small` preset (~46M parameters),
fp32, LoRA rank 8:
  whole policy     RSS added by build_policy(is_lora) on the CPU (the former host), every tensor read
  engine host      RSS added by VLLMOpenVLAOFT._host_policy (the host as it is now), every tensor read
  sync peak        peak RSS a LoRA sync adds in a running engine (VmHWM after clear_refs),
                   beside the bytes of the adapted layers' weights it writes
Median over repeats; prints whole policy / engine host.

    python benchmarks/vllm_lora_host.py [--repeats 3] [--preset small]
"""
from __future__ import annotations

import argparse
import ctypes
import importlib
import multiprocessing as mp
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")  # vLLM's CPU worker is ~50x slower without an explicit count


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _cfg(path: str):
    from embodied_rl.config.schema.model import model_config

    return model_config("openvla_oft", model_path=path, add_value_head=True, value_type="chunk_level",
                        is_lora=True, lora_rank=8)


def _rss_added(route: str, path: str, queue: mp.Queue) -> None:
    # Imported before the baseline RSS: libraries are not part of what is measured (embodied_rl
    # first: its import hook must be in place before peft pulls in transformers' models).
    import torch

    from embodied_rl.models.openvla_oft.vllm import engine
    from embodied_rl.models.registry import build_policy

    importlib.import_module("peft")

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _status_kib("VmRSS")
    if route == "whole policy":
        held = build_policy(_cfg(path), device="cpu", warn_untrained_value_head=False)
    else:
        held = engine._host_policy(Path(path), _cfg(path), 0)
    with torch.no_grad():  # read every tensor it holds, as a sync's fold does: memory-mapped pages become resident
        for t in held.state_dict().values():
            if not t.is_meta:
                t.float().sum()
    queue.put((_status_kib("VmRSS") - before) / 1024)
    del held


def _sync_peak(path: str, queue: mp.Queue) -> None:
    from embodied_rl.distributed.weight_sync import nbytes
    from embodied_rl.models.openvla_oft import lora
    from embodied_rl.models.openvla_oft.vllm.engine import VLLMOpenVLAOFT

    engine = VLLMOpenVLAOFT(path, _cfg(path), max_num_seqs=4)
    try:
        sd = {k: v + 0.01 if "lora_B" in k else v for k, v in engine.host.trainable_state_dict().items()}
        adapted = sum(nbytes(w) for _, w in lora.merged_adapted_weights(engine.host.vla, engine._base_weights))
        engine.load_trainable_state_dict(sd)  # warm-up: first touch of the allocator's pages
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        engine.load_trainable_state_dict({k: v + 0.01 if "lora_B" in k else v for k, v in sd.items()})
        queue.put(((_status_kib("VmHWM") - before) / 1024, adapted / 2**20))
    finally:
        engine.close()


def _in_fresh_process(target, *args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get(timeout=900)
    proc.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="small", help="model preset (tiny: a smoke run of the code path)")
    args = ap.parse_args()
    from embodied_rl.models.create import create_model

    path = str(create_model(args.preset, Path(tempfile.mkdtemp(prefix="lora_host_")) / args.preset, image_size=64, seed=0).path)
    held = {route: statistics.median(_in_fresh_process(_rss_added, route, path) for _ in range(args.repeats))
            for route in ("whole policy", "engine host")}
    syncs = [_in_fresh_process(_sync_peak, path) for _ in range(args.repeats)]
    print(f"{args.preset} preset, fp32, LoRA rank 8; median of {args.repeats} fresh processes each")
    for route, mib in held.items():
        print(f"  {route:13s} RSS +{mib:7.1f} MiB")
    print(f"  sync peak     RSS +{statistics.median(s[0] for s in syncs):7.1f} MiB "
          f"(the adapted layers' merged weights it writes: {syncs[0][1]:.1f} MiB)")
    print(f"host memory, whole policy / engine host: {held['whole policy'] / max(held['engine host'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
