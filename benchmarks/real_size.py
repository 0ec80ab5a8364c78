"""The real-size OpenVLA-OFT on this CPU: the memory plan's verdict, the checkpoint written and read
back through the official loader, and one rollout forward, each with its wall time and peak memory.

The `openvla-7b` preset (DINOv2 ViT-L + SigLIP So400m, Llama-2-7B; 7.56B parameters with the
proprio projector) is created with random weights in bf16 for two 224 px cameras and an 8-d
proprio state, as LIBERO runs it, and written in the official layout (config.json, safetensors
shards with an index, tokenizer, dataset statistics). Then, each stage in a fresh process so that
its peak RSS is its own:

  plan     `embodied-rl plan libero_grpo_tiny` on that checkpoint with LoRA rank 32, bf16 and
           gradient checkpointing, one sample per micro-batch: the table and whether it fits
           this machine (the CLI as a user runs it);
  reload   OpenVLAOFTPolicy.from_checkpoint in bf16 (the rollout worker's loader);
  forward  one `predict` on one observation (both cameras, proprio), sampled as in RL, against
           the plan's rollout term (the policy in bf16);
  backward (with --stages ...,backward; about an hour on this CPU) the largest part of the actor's
           LoRA update that fits a 24 GB machine: the policy in bf16 with LoRA rank 32 and gradient
           checkpointing, `evaluate_actions` on one observation's 56 action tokens and the backward
           of their mean log-prob through the whole trunk (vision, projector, Llama), against the
           plan's actor terms on one rank. No optimizer step, no FSDP and no fp32 masters: the
           whole update beside a rollout worker is what the plan refuses on this machine (an actor
           rank's weights and a rollout worker's policy copy, 14 GiB each in bf16).

    python benchmarks/real_size.py [--out DIR] [--keep] [--preset openvla-7b] [--image-size 224]
                                   [--stages create,plan,forward,backward]

A checkpoint already at --out DIR is reused when `create` is not among the stages.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30
STAGES = ("create", "plan", "forward", "backward")


def _peak_gib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024 / GIB


def _create(rank: int, preset: str, path: str, image_size: int, out: dict) -> None:
    from embodied_rl.models.create import create_model

    t = time.perf_counter()
    made = create_model(preset, path, image_size=image_size, num_images=2, use_proprio=True, proprio_dim=8, precision="bf16")
    out.update(seconds=time.perf_counter() - t, peak=_peak_gib(), params=made.num_parameters)


def _forward(rank: int, path: str, image_size: int, out: dict) -> None:
    import numpy as np
    import torch

    from embodied_rl.config.schema.model import model_config
    from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
    from embodied_rl.types import EnvObservation

    cfg = model_config("openvla_oft", model_path=path, num_images_in_input=2, use_proprio=True, proprio_dim=8, precision="bf16")
    t = time.perf_counter()
    policy = OpenVLAOFTPolicy.from_checkpoint(path, cfg, dtype=torch.bfloat16, warn_untrained_value_head=False).eval()
    mapped = time.perf_counter() - t
    # safetensors maps the files: read every page now, so that the forward times compute alone
    touched = sum(float(p.detach().reshape(-1)[::2048].float().sum()) for p in policy.parameters())
    out.update(reload_seconds=time.perf_counter() - t, mapped_seconds=mapped, reload_peak=_peak_gib(), touched=touched)
    rng = np.random.default_rng(0)
    obs = EnvObservation(main_images=rng.integers(0, 256, (1, image_size, image_size, 3), dtype=np.uint8),
                         wrist_images=rng.integers(0, 256, (1, image_size, image_size, 3), dtype=np.uint8),
                         states=rng.standard_normal((1, 8)).astype(np.float32), task_descriptions=["put the bowl on the plate"])
    inputs = policy.prepare_inputs(obs)
    seconds = []
    for _ in range(2):  # the first forward also pays one-time kernel set-up
        t = time.perf_counter()
        with torch.no_grad():
            pred = policy.predict(inputs, do_sample=True, temperature=1.0, compute_values=False,
                                  generator=torch.Generator().manual_seed(0))
        seconds.append(time.perf_counter() - t)
    out.update(forward_seconds=seconds, forward_peak=_peak_gib(), actions=tuple(pred.actions.shape),
               finite=bool(torch.isfinite(pred.actions).all()))


def _backward(rank: int, path: str, image_size: int, out: dict) -> None:
    import numpy as np
    import torch

    from embodied_rl.config.schema.model import model_config
    from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
    from embodied_rl.types import EnvObservation

    cfg = model_config("openvla_oft", model_path=path, num_images_in_input=2, use_proprio=True, proprio_dim=8, precision="bf16",
                       is_lora=True, lora_rank=32, gradient_checkpointing=True)
    t = time.perf_counter()
    policy = OpenVLAOFTPolicy.from_checkpoint(path, cfg, dtype=torch.bfloat16, warn_untrained_value_head=False).train()
    out.update(build_seconds=time.perf_counter() - t, build_peak=_peak_gib())
    rng = np.random.default_rng(0)
    obs = EnvObservation(main_images=rng.integers(0, 256, (1, image_size, image_size, 3), dtype=np.uint8),
                         wrist_images=rng.integers(0, 256, (1, image_size, image_size, 3), dtype=np.uint8),
                         states=rng.standard_normal((1, 8)).astype(np.float32), task_descriptions=["put the bowl on the plate"])
    inputs = policy.prepare_inputs(obs)
    # Any stored tokens re-score: random bins stand in for a rollout's (its forward is the stage above).
    tokens = torch.from_numpy(rng.integers(0, 256, (1, cfg.num_action_chunks * cfg.action_dim))).long()
    t = time.perf_counter()
    scored = policy.evaluate_actions(inputs, tokens, temperature=1.0, compute_values=False)
    forward = time.perf_counter() - t
    loss = -scored["logprobs"].float().mean()
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    out.update(forward_seconds=forward, backward_seconds=time.perf_counter() - t - forward, peak=_peak_gib(),
               trainable=sum(p.numel() for p in policy.parameters() if p.requires_grad),
               with_grad=sum(g is not None for g in grads), of=len(grads),
               finite=all(bool(torch.isfinite(g).all()) for g in grads if g is not None),
               nonzero=sum(bool(g.abs().sum() > 0) for g in grads if g is not None))


def _spawn(fn, *args) -> dict:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(fn, args=(*args, out), nprocs=1, start_method="spawn")
        return dict(out)


def _plan(path: str, image_size: int) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "embodied_rl.cli", "plan", "libero_grpo_tiny", f"actor.model.model_path={path}",
           "actor.model.create_preset=null", "actor.model.is_lora=true", "actor.model.lora_rank=32", "actor.model.precision=bf16",
           "actor.model.gradient_checkpointing=true", "actor.micro_batch_size=1",
           *(f"env.{s}.init_params.camera_{d}={image_size}" for s in ("train", "eval") for d in ("heights", "widths"))]
    done = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.returncode, (done.stdout + done.stderr).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="checkpoint directory (default: a temporary one, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint")
    ap.add_argument("--preset", default="openvla-7b")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--stages", default="create,plan,forward", help=f"of {','.join(STAGES)}")
    args = ap.parse_args()
    stages = args.stages.split(",")
    if unknown := [s for s in stages if s not in STAGES]:
        ap.error(f"--stages: unknown {unknown}; choose from {','.join(STAGES)}")
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="real_size_"))
    path = str(root / args.preset)
    if "create" not in stages and not (Path(path) / "config.json").is_file():
        ap.error(f"--stages without create needs a checkpoint at {path} (an earlier run with --out {root} --keep)")
    try:
        if "create" in stages:
            made = _spawn(_create, args.preset, path, args.image_size)
            size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / GIB
            print(f"create + write: {made['params']:,} parameters, {size:.2f} GiB on disk, {made['seconds']:.0f} s, "
                  f"peak RSS {made['peak']:.2f} GiB", flush=True)
        if "plan" in stages:
            code, text = _plan(path, args.image_size)
            print(f"plan (exit {code}):\n{text}", flush=True)
        if "forward" in stages:
            ran = _spawn(_forward, path, args.image_size)
            print(f"reload (official loader, bf16): {ran['reload_seconds']:.0f} s with every page read ({ran['mapped_seconds']:.0f} s "
                  f"to map), peak RSS {ran['reload_peak']:.2f} GiB", flush=True)
            first, second = ran["forward_seconds"]
            print(f"forward (one observation, 2 cameras at {args.image_size} px, sampled): {first:.0f} s, then {second:.0f} s; "
                  f"peak RSS {ran['forward_peak']:.2f} GiB, actions {ran['actions']}, finite {ran['finite']}", flush=True)
        if "backward" in stages:
            ran = _spawn(_backward, path, args.image_size)
            print(f"backward (LoRA r32, bf16, gradient checkpointing, one observation): build {ran['build_seconds']:.0f} s "
                  f"(peak RSS {ran['build_peak']:.2f} GiB), evaluate_actions {ran['forward_seconds']:.0f} s, backward "
                  f"{ran['backward_seconds']:.0f} s; peak RSS {ran['peak']:.2f} GiB; {ran['trainable']:,} trainable parameters, "
                  f"gradients on {ran['with_grad']} of {ran['of']} tensors ({ran['nonzero']} non-zero), finite {ran['finite']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
