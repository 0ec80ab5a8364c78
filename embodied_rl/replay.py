"""A run's checkpoint as a policy in this process: what scripts that replay its episodes outside
a run build on (scripts/pick_cube_failures.py, scripts/advantage_sources.py). Runs load weights
through their workers instead."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from embodied_rl.config.schema import RootConfig
from embodied_rl.configure import config_from_dict
from embodied_rl.runtime.checkpoint import (
    CONFIG,
    load_trainable_weights,
    resolve_resume_dir,
)


def checkpoint_policy(ckpt_dir: str | Path, *, device: str = "cpu") -> tuple[RootConfig, Any]:
    """(the run's config, its HuggingFace rollout policy with the checkpoint's weights and
    statistics). `ckpt_dir`: a checkpoints/global_step_N directory, or a run directory for its
    latest. Relative paths of the run's config (model_path) resolve against the current
    directory, as for `embodied-rl eval`. The returned config is the run's own (its attention
    kernel too, even where the policy was built with sdpa instead of flash_attention_2)."""
    from embodied_rl.models.rollout_backends import build_rollout_policy

    d = resolve_resume_dir(str(ckpt_dir), ".", key="checkpoint")
    # The demos an SFT run trained on are not needed to act (and may lie elsewhere).
    cfg = config_from_dict(OmegaConf.to_container(OmegaConf.load(d / CONFIG), resolve=True), plan=False, skip=("sft_data",))
    # A run trained with flash_attention_2 replays where flash-attn cannot run (e.g. on the CPU) with sdpa.
    model_cfg = cfg.actor.model.runnable_on(torch.device(device))
    policy = build_rollout_policy("huggingface", model_cfg, device=torch.device(device), init_seed=cfg.runner.seed)
    weights, _, stats = load_trainable_weights(str(d), d)
    policy.load_trainable_state_dict(weights)
    if stats is not None:  # as the runner does: the checkpoint's statistics win over model_path's
        policy.set_dataset_statistics(stats)
    return cfg, policy
