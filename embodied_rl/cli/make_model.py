"""`embodied-rl make-model PRESET OUT_DIR`: write a random-init policy in its checkpoint layout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embodied_rl.errors import UserError

IDENTITY_KEY = "identity"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied-rl make-model", description=(
        "Write a randomly initialised policy checkpoint (config.json, safetensors, dataset_statistics.json with "
        "identity statistics; an OpenVLA-OFT one also a tokenizer) that loads like a trained one."))
    p.add_argument("preset", help="architecture: openvla_oft: tiny (~0.4M params), small (~45M) or openvla-7b (~7.5B, ~30 GB on disk); "
                                  "cnn_gaussian: tiny or nature_cnn (ManiSkill's ppo_rgb sizes)")
    p.add_argument("out_dir", type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--model-type", default="openvla_oft", help="policy type (actor.model.model_type): openvla_oft | cnn_gaussian")
    p.add_argument("--image-size", type=int, default=224, help="input side in pixels (224 = official OFT; 56-64 for fast CPU runs)")
    p.add_argument("--num-images", type=int, choices=(1, 2), default=1, help="cameras the model is made for (2 = third-person + wrist); recorded in config.json and checked at load")
    p.add_argument("--action-dim", type=int, default=7, help="action dimensions in dataset_statistics.json")
    p.add_argument("--num-action-chunks", type=int, default=None, help="actions per forward pass where it sizes the model (cnn_gaussian); default: the model type's")
    p.add_argument("--proprio-dim", type=int, default=8, help="proprio (state) dimensions in dataset_statistics.json")
    p.add_argument("--proprio", action="store_true", default=None, help="also read the state (actor.model.use_proprio; OFT: write a proprio projector, cnn_gaussian: a state MLP)")
    p.add_argument("--unnorm-key", default=IDENTITY_KEY, help="key of the (identity) statistics entry")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="dtype of the written weights (bf16 halves openvla-7b to ~15 GB)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisation")
    return p


def make_model_main(argv: list[str]) -> int:
    """Entry point the top-level CLI dispatches to; returns the exit status."""
    from embodied_rl.config.schema.model import model_config_class
    from embodied_rl.models.create import create_model

    args = _parser().parse_args(argv)
    presets = model_config_class(args.model_type)(model_type=args.model_type).preset_names()
    if args.preset not in presets:
        raise UserError(f"make-model: {args.preset!r} is not a preset of --model-type {args.model_type}; available: {', '.join(presets)}")
    keys = {} if args.num_action_chunks is None else {"num_action_chunks": args.num_action_chunks}
    made = create_model(args.preset, args.out_dir, model_type=args.model_type, image_size=args.image_size, num_images=args.num_images,
                        action_dim=args.action_dim, proprio_dim=args.proprio_dim, use_proprio=args.proprio, unnorm_key=args.unnorm_key,
                        precision=args.precision, seed=args.seed, model_keys=keys)
    print(f"wrote {args.preset} {args.model_type} ({made.num_parameters / 1e6:.2f}M parameters, {args.precision}, "
          f"{args.image_size}px, {args.num_images} image(s)) to {made.path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(make_model_main(sys.argv[1:]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
