"""`embodied-rl export CHECKPOINT OUT_DIR`: a training checkpoint's policy as a plain model.

CHECKPOINT is `checkpoints/global_step_N` or a run directory (its newest complete checkpoint),
resolved like `runner.resume_dir`. The policy is rebuilt from the
checkpoint's own resolved config, so the export needs no experiment config; the output is in
the official on-disk layout and loads with `actor.model.model_path=OUT_DIR`. The export
builds on the CPU: a run trained with flash_attention_2 is exported with sdpa, which gives the
same weights; the attention kernel is the loading run's choice (actor.model.attn_implementation).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_rl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embodied-rl export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="checkpoints/global_step_N or a run directory (its newest checkpoint)")
    parser.add_argument("out_dir", help="directory to write the model to (must not exist, or be empty)")
    parser.add_argument("--adapters", action="store_true",
                        help="keep LoRA adapters separate (base weights + lora_adapter/) instead of merging them")
    return parser


def export(checkpoint: str, out_dir: str | Path, *, merged: bool = True) -> Path:
    """Resolve the checkpoint, rebuild its policy from its saved config and write it to out_dir."""
    from embodied_rl.configure import load_config
    from embodied_rl.runtime.checkpoint import CONFIG, export_policy, resolve_resume_dir

    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"export: {out} exists and is not an empty directory; pass a new OUT_DIR")
    ckpt = resolve_resume_dir(checkpoint, checkpoint, key="export CHECKPOINT")  # complete checkpoints always hold config.yaml
    # Read as a config of another machine: the run's GPUs, placement and demos are not needed here.
    model_cfg = load_config(str(ckpt / CONFIG), plan=False, skip=("sft_data",)).actor.model
    if not merged and not model_cfg.is_lora:
        raise UserError(f"export --adapters: {ckpt} was trained without LoRA (actor.model.is_lora=false); drop --adapters")
    return export_policy(ckpt, model_cfg, out, merged=merged)


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(argv))
    out = export(ns.checkpoint, ns.out_dir, merged=not ns.adapters)
    print(f"exported {ns.checkpoint} -> {out}", file=sys.stderr)
    return 0
