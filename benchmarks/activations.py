"""Activation memory of one actor micro-batch, as the memory plan counts it (models/activations.py),
with and without gradient checkpointing, for an OpenVLA-OFT preset built on the meta device (no
weights allocated: the 7.5B preset counts on a laptop).

Defaults are the real-size policy as RLinf's LIBERO runs use it: `openvla-7b`, LoRA rank 32, bf16
compute, two 224 px cameras and an 8-d proprio state. Prints bytes per micro-batch and the ratio
checkpointing / none per micro-batch size.

    python benchmarks/activations.py [--preset openvla-7b] [--batches 1,8] [--image-size 224] [--fp32] [--full]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from embodied_rl.config.schema.model import model_config
from embodied_rl.models.activations import count_activations
from embodied_rl.models.registry import policy_class
from embodied_rl.types import EnvObservation


def _observation(batch: int, size: int, proprio: int) -> EnvObservation:
    image = np.zeros((batch, size, size, 3), dtype=np.uint8)
    return EnvObservation(main_images=image, wrist_images=image.copy(), states=np.zeros((batch, proprio), dtype=np.float32),
                          task_descriptions=["put both the alphabet soup and the tomato sauce in the basket"] * batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="openvla-7b")
    ap.add_argument("--batches", default="1,8", help="micro-batch sizes, comma-separated")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--fp32", action="store_true", help="fp32 compute instead of bf16")
    ap.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA rank 32")
    args = ap.parse_args()
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    cfg = model_config("openvla_oft", model_path="(meta)", num_images_in_input=2, use_proprio=True, proprio_dim=8,
                       is_lora=not args.full, lora_rank=32)
    cls = policy_class("openvla_oft")
    print(f"{args.preset}, {'full' if args.full else 'LoRA r32'}, {'fp32' if args.fp32 else 'bf16'}, two {args.image_size} px cameras")
    print("| micro-batch | activations GiB | with checkpointing GiB | ratio checkpointing / none | count s |")
    print("|---|---|---|---|---|")
    for batch in (int(b) for b in args.batches.split(",")):
        t0 = time.perf_counter()
        with torch.device("meta"):
            policy = cls.from_preset(args.preset, cfg, device="meta", dtype=dtype, image_size=args.image_size, action_dim=7, proprio_dim=8)
        counted = count_activations(policy, _observation(batch, args.image_size, 8))
        none, ckpt = counted.peak(False), counted.peak(True)
        print(f"| {batch} | {none / 2**30:.3f} | {ckpt / 2**30:.3f} | {ckpt / none:.3f} | {time.perf_counter() - t0:.1f} |")


if __name__ == "__main__":
    main()
