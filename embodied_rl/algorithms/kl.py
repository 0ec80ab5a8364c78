"""Per-entry KL estimators between the policy and a frozen reference policy.

`logprobs` and `ref_logprobs` are the log-probs of the sampled action record's entries,
any shape [...] (the rollout keeps only those, not the full distributions); each
estimator returns a tensor of that shape.
"""
from __future__ import annotations

import torch
from torch import Tensor

from embodied_rl.algorithms.registry import KL_PENALTIES


@KL_PENALTIES.register("kl")
def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """log pi - log ref: unbiased, can be negative per sample."""
    return logprobs - ref_logprobs


@KL_PENALTIES.register("abs")
def kl_abs(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    return (logprobs - ref_logprobs).abs()


@KL_PENALTIES.register("mse")
def kl_mse(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """0.5 * (log pi - log ref)^2 (Schulman's k2)."""
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_PENALTIES.register("low_var_kl")
def kl_low_var(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k3: exp(ref - pi) - (ref - pi) - 1 >= 0, clamped to [-10, 10] for stability."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0)


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kind: str) -> Tensor:
    """Dispatch to the estimator registered as `kind` (ConfigError listing names otherwise)."""
    return KL_PENALTIES.get(kind)(logprobs, ref_logprobs)
