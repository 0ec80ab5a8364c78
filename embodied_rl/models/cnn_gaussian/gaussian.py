"""Pure functions of a diagonal Gaussian over normalised actions: sampling, log-probs, entropy,
and the squash from a sample (the action record) to the action in [-1, 1].

Shapes: means and samples float [B, D] with D = C*A; log_std float [D]. Every function returns
per-dimension values [B, D]: the runtime groups them per action or chunk (sums of log-probs).
"""
from __future__ import annotations

import math

import torch

from embodied_rl.models.generators import GeneratorLike, generator_for

LOG_STD_BOUNDS = (-5.0, 2.0)  # as many SAC/PPO implementations: no collapse, no blow-up
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# A demo action at exactly +-1 has no finite tanh pre-image: recorded at atanh(+-(1 - eps)).
TANH_EDGE = 1e-3


def std_of(log_std: torch.Tensor, temperature: float) -> torch.Tensor:
    """float [D]: the standard deviation at `temperature` (which scales it)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use do_sample=False for the mean), got {temperature}")
    return log_std.float().clamp(*LOG_STD_BOUNDS).exp() * temperature


def sample(mean: torch.Tensor, std: torch.Tensor, do_sample: bool, generator: GeneratorLike = None) -> torch.Tensor:
    """[B, D]: mean + std * N(0, 1) (drawn with the generator on the means' device), or the mean."""
    if not do_sample:
        return mean.float().clone()
    noise = torch.randn(mean.shape, device=mean.device, generator=generator_for(generator, mean.device))
    return mean.float() + std * noise


def log_prob(u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, squash: str) -> torch.Tensor:
    """[B, D] log-density of the records u under N(mean, std); with tanh, of the action tanh(u)."""
    z = (u.float() - mean.float()) / std
    out = -0.5 * z.square() - std.log() - HALF_LOG_2PI
    if squash == "tanh":  # log |d tanh(u) / du| = log(1 - tanh(u)^2), in a stable form
        out = out - 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
    return out


def entropy(std: torch.Tensor, batch: int) -> torch.Tensor:
    """[B, D] entropy of each dimension's Gaussian (before any squash: tanh's has no closed form)."""
    return (0.5 + HALF_LOG_2PI + std.log()).expand(batch, -1).clone()


def squash_action(u: torch.Tensor, squash: str) -> torch.Tensor:
    """Records [B, D] -> normalised actions [B, D] in [-1, 1]."""
    return torch.tanh(u) if squash == "tanh" else u.clamp(-1.0, 1.0)


def unsquash(actions: torch.Tensor, squash: str) -> torch.Tensor:
    """Normalised actions [N, D] -> the records a sample would have had (the inverse of squash_action)."""
    if squash == "tanh":
        return torch.atanh(actions.float().clamp(-1.0 + TANH_EDGE, 1.0 - TANH_EDGE))
    return actions.float().clone()
