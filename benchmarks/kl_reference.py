"""Memory of the frozen KL reference on a rollout worker: a second model copy vs the policy's own weights.

Each variant runs in a fresh Python process (so allocations of one never hide in another's
heap) and does what the rollout worker does: build the LoRA policy and sample a batch with
it, then build the reference and score the batch with it. Reported per variant:
  policy MiB  VmRSS growth from building the policy and its first forward (for scale);
  ref MiB     resident memory the reference adds: VmRSS after its first scoring minus VmRSS
              after the policy's own first forward (weights loaded from safetensors are
              file-backed mmap pages until touched, so RSS is read after both forwards);
  tensor MiB  bytes of the tensors the reference adds (exact; what a GPU would hold);
  peak MiB    the process's peak RSS over the whole sequence;
  ref ms      one reference scoring of the batch (median of 3).
Variants:
  second_copy     the baseline: a second full policy built from the checkpoint (what the
                  rollout worker did for every run before; still the path for full fine-tuning);
  adapters_off    fresh LoRA: the policy itself with its adapters disabled;
  frozen_adapters LoRA loaded from `lora_path`: the policy with a frozen copy of the loaded adapters.
Ratios are against second_copy measured in the same run.

Models: the tiny preset, and `mid` (~0.2B parameters: the tiny preset's wiring widened to
ViT-S-sized towers and a 1024-d x 12-layer Llama), written to a temporary directory. The
openvla-7b preset is out of reach on a CPU box: the baseline needs two copies (2 x 15 GB in bf16).

    python benchmarks/kl_reference.py                 # tiny and mid
    python benchmarks/kl_reference.py --models tiny
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import embodied_rl  # noqa: F401  (torchvision shim before timm)
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.reference import KLReference, build_kl_reference
from embodied_rl.types import EnvObservation

VARIANTS = ("second_copy", "adapters_off", "frozen_adapters")
BATCH, IMAGE = 8, 64


def rss_mib() -> float:
    gc.collect()
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def tensor_mib(module: torch.nn.Module) -> float:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values()) / 2**20


def warm_imports() -> None:
    """Import what building a policy imports, so RSS deltas count tensors, not modules."""
    import peft  # noqa: F401
    import timm  # noqa: F401
    from transformers import LlamaModel  # noqa: F401


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# ------------------------------------------------------------------------- checkpoints
def mid_arch():
    from embodied_rl.models.openvla_oft.presets import _llama, tiny_arch

    arch = tiny_arch(image_size=IMAGE)
    arch.text_config = _llama(arch.base_vocab_size + 64, 1024, 2816, 12, 16, arch.pad_token_id)
    arch.timm_override_args = [{"embed_dim": 384, "depth": 6, "num_heads": 6}, {"embed_dim": 384, "depth": 6, "num_heads": 6}]
    return arch


def write_checkpoints(model: str, root: Path) -> tuple[Path, Path]:
    """(base checkpoint, adapter dir of a LoRA policy on it) for `model`."""
    from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
    from embodied_rl.models.openvla_oft.presets import identity_statistics
    from embodied_rl.models.openvla_oft.tiny_tokenizer import build_tiny_tokenizer

    torch.manual_seed(0)
    base = root / model
    if model == "tiny":
        from embodied_rl.models.create import create_model

        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the table
            create_model("tiny", str(base), image_size=IMAGE)
    else:
        arch = mid_arch()
        tokenizer = build_tiny_tokenizer(arch.base_vocab_size, arch.n_action_bins)
        policy = OpenVLAOFTPolicy(OpenVLAOFTConfig(model_path=str(base), add_value_head=False), arch, tokenizer,
                                  identity_statistics(7, 8))
        policy.save_checkpoint(base)
        del policy
    build_policy(model_config(base, None)).save_checkpoint(root / f"{model}-lora")
    return base, root / f"{model}-lora" / "lora_adapter"


def model_config(base: Path, lora_path: Path | None) -> OpenVLAOFTConfig:
    return OpenVLAOFTConfig(model_path=str(base), is_lora=True, lora_path=None if lora_path is None else str(lora_path),
                       add_value_head=True, value_type="chunk_level")


# ------------------------------------------------------------------------- one variant
def make_obs() -> EnvObservation:
    rng = np.random.default_rng(0)
    return EnvObservation(main_images=rng.integers(0, 256, (BATCH, IMAGE, IMAGE, 3), dtype=np.uint8),
                          states=np.zeros((BATCH, 8), np.float32), task_descriptions=["pick up the red cube"] * BATCH)


def measure(variant: str, base: Path, adapters: Path) -> dict[str, float]:
    cfg = model_config(base, adapters if variant == "frozen_adapters" else None)
    warm_imports()
    before_policy = rss_mib()
    policy = build_policy(cfg, warn_untrained_value_head=False).eval()  # as the rollout worker builds it
    inputs = policy.prepare_inputs(make_obs())
    with torch.no_grad():
        tokens = policy.predict(inputs, do_sample=True, compute_values=False).action_record
    before_ref, policy_tensors = rss_mib(), tensor_mib(policy)
    if variant == "second_copy":
        reference = KLReference(build_policy(cfg, warn_untrained_value_head=False).eval())
        held = tensor_mib(reference.scorer)
    else:
        reference = build_kl_reference(policy, cfg, "cpu")
        assert reference.shares_weights
        held = tensor_mib(policy) - policy_tensors  # the frozen adapter copy registers inside the policy
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        reference.logprobs(inputs, tokens)
        times.append(time.perf_counter() - t0)
    after_ref = rss_mib()
    return {"policy_mib": before_ref - before_policy, "ref_mib": after_ref - before_ref, "tensor_mib": held, "peak_mib": peak_mib(),
            "ref_ms": 1e3 * statistics.median(times),
            "params_m": sum(p.numel() for p in policy.parameters()) / 1e6}


def run_child(variant: str, base: Path, adapters: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", variant, "--base", str(base), "--adapters", str(adapters)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "mid"], choices=["tiny", "mid"])
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--base", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--adapters", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.base, args.adapters)))
        return
    print("| model | params M | variant | policy MiB | ref MiB | ref vs copy | tensor MiB | tensor vs copy | peak MiB | peak vs copy | ref ms |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            base, adapters = write_checkpoints(model, Path(tmp))
            rows = {v: run_child(v, base, adapters) for v in VARIANTS}
            copy = rows["second_copy"]
            for v, r in rows.items():
                print(f"| {model} | {r['params_m']:.1f} | {v} | {r['policy_mib']:.0f} | {r['ref_mib']:.1f} | "
                      f"{r['ref_mib'] / copy['ref_mib']:.3f} | {r['tensor_mib']:.2f} | {r['tensor_mib'] / copy['tensor_mib']:.3f} | "
                      f"{r['peak_mib']:.0f} | {r['peak_mib'] / copy['peak_mib']:.2f} | "
                      f"{r['ref_ms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
