"""`embodied-rl make-model PRESET OUT_DIR`: write a random-init policy in the official checkpoint layout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from embodied_rl.errors import UserError


def _parser() -> argparse.ArgumentParser:
    from embodied_rl.models.openvla_oft.presets import IDENTITY_KEY, PRESETS

    p = argparse.ArgumentParser(prog="embodied-rl make-model", description=(
        "Write a randomly initialised OpenVLA-OFT checkpoint (config.json, safetensors, tokenizer, "
        "dataset_statistics.json with identity statistics) that loads like an official one."))
    p.add_argument("preset", choices=sorted(PRESETS), help="architecture: tiny (~0.4M params) or openvla-7b (~7.5B, ~30 GB on disk)")
    p.add_argument("out_dir", type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--image-size", type=int, default=224, help="input side in pixels (224 = official; 56-64 for fast CPU runs)")
    p.add_argument("--num-images", type=int, choices=(1, 2), default=1, help="cameras the model is made for (2 = third-person + wrist); recorded in config.json and checked at load")
    p.add_argument("--action-dim", type=int, default=7, help="action dimensions in dataset_statistics.json")
    p.add_argument("--proprio-dim", type=int, default=8, help="proprio dimensions in dataset_statistics.json")
    p.add_argument("--unnorm-key", default=IDENTITY_KEY, help="key of the (identity) statistics entry")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="dtype of the written weights (bf16 halves openvla-7b to ~15 GB)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisation")
    return p


def make_model_main(argv: list[str]) -> int:
    """Entry point the top-level CLI dispatches to; returns the exit status."""
    args = _parser().parse_args(argv)
    from embodied_rl.config.schema.model import ModelConfig
    from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy

    out: Path = args.out_dir
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not empty; choose a new directory")
    torch.manual_seed(args.seed)
    cfg = ModelConfig(model_path=str(out), action_dim=args.action_dim, num_images_in_input=args.num_images,
                      proprio_dim=args.proprio_dim, unnorm_key=args.unnorm_key)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    policy = OpenVLAOFTPolicy.from_preset(args.preset, cfg, dtype=dtype, image_size=args.image_size, action_dim=args.action_dim,
                                          proprio_dim=args.proprio_dim, num_images_in_input=args.num_images,
                                          unnorm_key=args.unnorm_key)
    policy.save_checkpoint(out)
    n = sum(p.numel() for p in policy.parameters())
    print(f"wrote {args.preset} OpenVLA-OFT ({n / 1e6:.2f}M parameters, {args.precision}, {args.image_size}px, {args.num_images} image(s)) to {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(make_model_main(sys.argv[1:]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
