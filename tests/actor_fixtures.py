"""Helpers for the actor tests: a real tiny OFT checkpoint, configs, and a real rollout batch.

The batch is what the runtime hands the actor (see embodied_rl/workers/actor_batch.py):
observations are random 56 px images, but every tensor comes from the real policy's
`prepare_inputs` + `predict` and the real `compute_advantages`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from embodied_rl.algorithms import compute_advantages
import dataclasses

from embodied_rl.config import RootConfig
from embodied_rl.config.loader import deep_merge, resolve, validate
from embodied_rl.config.overrides import apply_override, parse_override
from embodied_rl.envs.messages import EnvObservation
from embodied_rl.models import build_policy
from embodied_rl.models.cli import make_model_main

T, N = 4, 4  # chunk steps x envs -> 16 samples


def make_tiny_model(dirpath: Path) -> Path:
    out = dirpath / "tiny-oft-56"
    if not out.exists():
        assert make_model_main(["tiny", str(out), "--image-size", "56", "--seed", "0"]) == 0
    return out


def actor_config(model_path: Path, *overrides: str):
    """Schema defaults (PPO + GAE) with the test model, a value head and small batches.

    Built from the schema rather than an experiment file so the actor tests depend on the
    config system only, not on which env configs exist.
    """
    tree = deep_merge(dataclasses.asdict(RootConfig()), {
        "env": {"train": {"env_type": "maniskill"}, "eval": {"env_type": "maniskill"}},
        "actor": {"micro_batch_size": 4, "global_batch_size": 8,
                  "model": {"model_path": str(model_path), "add_value_head": True, "value_type": "chunk_level"},
                  "optim": {"clip_grad": 1.0}},
        "runner": {"max_steps": 5, "seed": 7},
    })
    for ov in overrides:
        apply_override(tree, parse_override(ov))
    return validate(resolve(tree))


def make_rollout_batch(cfg, seed: int = 0) -> dict:
    """A time-major batch [T, N, ...] as the runtime produces it, from real policy calls."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    policy = build_policy(cfg.actor.model, device="cpu", dtype=torch.float32).eval()
    size = policy.arch.image_size
    obs = EnvObservation(
        main_images=rng.integers(0, 256, size=(T * N, size, size, 3), dtype=np.uint8),
        states=rng.standard_normal((T * N, 8)).astype(np.float32),
        task_descriptions=["pick up the cube"] * (T * N),
    )
    with torch.no_grad():
        inputs = policy.prepare_inputs(obs)
        out = policy.predict(inputs, do_sample=True, temperature=1.0, top_k=0, compute_values=True, generator=gen)
    tm = lambda x: x.reshape(T, N, *x.shape[1:])  # noqa: E731
    c = cfg.actor.model.num_action_chunks
    values = tm(out.values)
    rollout = {
        "rewards": torch.rand(T, N, c, generator=gen),
        "dones": torch.zeros(T, N, c, dtype=torch.bool),
        "values": torch.cat([values, values[-1:]], dim=0),  # [T + 1, N, K]
        "old_logprobs": tm(out.logprobs),
    }
    rollout["dones"][1, 0, -1] = True
    adv = compute_advantages(cfg.algorithm, rollout, action_dim=cfg.actor.model.action_dim, auto_reset=True)
    batch = {
        "forward_inputs": {k: tm(v) for k, v in out.forward_inputs.items()},
        "action_tokens": tm(out.action_tokens),
        "logprobs": tm(out.logprobs),
        "values": values,
        "advantages": adv["advantages"],
        "loss_mask": adv["loss_mask"],
        "returns": adv["returns"],
        "value_mask": adv["value_mask"],
    }
    return batch
