"""`embodied-rl make-model PRESET OUT_DIR`: write a random-init policy in the official checkpoint layout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embodied_rl.errors import UserError


def _parser() -> argparse.ArgumentParser:
    from embodied_rl.models.openvla_oft.presets import IDENTITY_KEY, PRESETS

    p = argparse.ArgumentParser(prog="embodied-rl make-model", description=(
        "Write a randomly initialised OpenVLA-OFT checkpoint (config.json, safetensors, tokenizer, "
        "dataset_statistics.json with identity statistics) that loads like an official one."))
    p.add_argument("preset", choices=sorted(PRESETS), help="architecture: tiny (~0.4M params), small (~45M) or openvla-7b (~7.5B, ~30 GB on disk)")
    p.add_argument("out_dir", type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--image-size", type=int, default=224, help="input side in pixels (224 = official; 56-64 for fast CPU runs)")
    p.add_argument("--num-images", type=int, choices=(1, 2), default=1, help="cameras the model is made for (2 = third-person + wrist); recorded in config.json and checked at load")
    p.add_argument("--action-dim", type=int, default=7, help="action dimensions in dataset_statistics.json")
    p.add_argument("--proprio-dim", type=int, default=8, help="proprio dimensions in dataset_statistics.json")
    p.add_argument("--proprio", action="store_true", help="also write a proprio projector (for actor.model.use_proprio: the state as one projected input)")
    p.add_argument("--unnorm-key", default=IDENTITY_KEY, help="key of the (identity) statistics entry")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="dtype of the written weights (bf16 halves openvla-7b to ~15 GB)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisation")
    return p


def make_model_main(argv: list[str]) -> int:
    """Entry point the top-level CLI dispatches to; returns the exit status."""
    from embodied_rl.models.create import create_model

    args = _parser().parse_args(argv)
    made = create_model(args.preset, args.out_dir, image_size=args.image_size, num_images=args.num_images,
                        action_dim=args.action_dim, proprio_dim=args.proprio_dim, use_proprio=args.proprio, unnorm_key=args.unnorm_key,
                        precision=args.precision, seed=args.seed)
    print(f"wrote {args.preset} OpenVLA-OFT ({made.num_parameters / 1e6:.2f}M parameters, {args.precision}, "
          f"{args.image_size}px, {args.num_images} image(s)) to {made.path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(make_model_main(sys.argv[1:]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
