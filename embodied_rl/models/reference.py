"""The frozen KL reference: log-probs of sampled actions under the policy as RL started.

`build_kl_reference` picks how to keep that starting policy, so callers never branch on it:
  - a view of the policy itself when the policy can provide one (LoRA: the base weights with
    the adapters switched off, or a frozen copy of adapters it was loaded with), at the cost
    of a few adapter-sized tensors;
  - otherwise (full fine-tuning, where training moves every weight) a second, frozen copy of
    the checkpoint, without the value head it does not need.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import torch

from embodied_rl.models.base import BasePolicy
from embodied_rl.models.registry import build_policy

if TYPE_CHECKING:
    from embodied_rl.config.schema.model import ModelConfig


class KLReference:
    """Scores action records with `scorer` inside `view()` (the starting weights)."""

    def __init__(self, scorer: BasePolicy, view: Callable[[], AbstractContextManager[None]] = nullcontext,
                 *, shares_weights: bool = False) -> None:
        self.scorer, self._view, self.shares_weights = scorer, view, shares_weights

    @torch.no_grad()
    def logprobs(self, inputs: dict[str, torch.Tensor], action_record: torch.Tensor, *,
                 temperature: float = 1.0) -> torch.Tensor:
        """float [B, L] log-probs of `action_record` [B, ...] (PolicyOutput.action_record) under the
        distribution the rollout recorded its own log-probs under (same temperature, the policy's
        own sampling settings)."""
        with self._view():
            out = self.scorer.evaluate_actions(inputs, action_record, temperature=temperature, compute_values=False)
        return out["logprobs"]

    def to(self, device: torch.device | str) -> None:
        """Move a separate copy (offload); a shared view moves with its policy."""
        if not self.shares_weights:
            self.scorer.to(device)


def build_kl_reference(policy: BasePolicy, model_cfg: ModelConfig, device: torch.device | str,
                       init_seed: int = 0) -> KLReference:
    """The reference for `policy`, which must still hold its starting weights (call before any update).

    init_seed: the one `policy` was built with, so weights its checkpoint lacks match."""
    view = policy.reference_view()
    if view is not None:
        return KLReference(policy, view, shares_weights=True)
    frozen_cfg = dataclasses.replace(model_cfg, add_value_head=False)
    frozen = build_policy(frozen_cfg, device=device, init_seed=init_seed).eval().requires_grad_(False)
    return KLReference(frozen)
