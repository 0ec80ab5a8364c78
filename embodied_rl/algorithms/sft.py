"""Supervised fine-tuning loss on demonstrated actions (behaviour cloning)."""
from __future__ import annotations

import torch
from torch import Tensor

from embodied_rl.algorithms.masks import masked_mean


def sft_loss(logprobs: Tensor, loss_mask: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean negative log-likelihood of the expert's action records.

    logprobs:  float [B, L]  log-probs of the expert's action record (policy.evaluate_actions at
                             temperature 1), L = the policy's log-prob entries per sample
    loss_mask: bool  [B, L]  False for the steps of a chunk past the end of its episode
    Returns (scalar loss, metrics): sft/nll and sft/expert_prob (mean probability of an
    entry of the expert's record: 1 for a perfect policy), detached 0-dim tensors on
    the loss's device (the caller converts them once per training step).
    """
    mask = loss_mask.to(logprobs.dtype)
    nll = -masked_mean(logprobs, mask)
    with torch.no_grad():
        prob = masked_mean(logprobs.exp(), mask)
    return nll, {"sft/nll": nll.detach(), "sft/expert_prob": prob}
