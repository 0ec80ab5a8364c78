"""The modules of ManiSkill's pixel PPO baseline (ppo_rgb): NatureCNN on the camera images, a
Linear-ReLU on the state, the two concatenated, an MLP to the Gaussian's means, and a critic MLP.
Orthogonal initialisation as there: gain sqrt(2) for hidden layers, 0.01 sqrt(2) for the means
(the first actions stay near 0), 1 for the value output."""
from __future__ import annotations

import math

import torch
from torch import nn

from embodied_rl.models.input_norm import InputNormalizer

HIDDEN_GAIN = math.sqrt(2.0)


def orthogonal(layer: nn.Module, gain: float = HIDDEN_GAIN) -> nn.Module:
    if layer.weight.is_meta:  # a skeleton: the checkpoint brings the values
        return layer
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def conv_side(image_size: int) -> int:
    """Side of NatureCNN's last feature map for a square input (64 px -> 15 -> 6 -> 4)."""
    side = (image_size - 8) // 4 + 1
    side = (side - 4) // 2 + 1
    return side - 2


class NatureCNN(nn.Module):
    """images float [B, 3*N, S, S] in [0, 1] -> features float [B, F] (conv 8x8/4, 4x4/2, 3x3/1, FC, ReLUs)."""

    def __init__(self, in_channels: int, channels: list[int], image_size: int, feature_dim: int) -> None:
        super().__init__()
        c1, c2, c3 = channels
        self.convs = nn.Sequential(
            orthogonal(nn.Conv2d(in_channels, c1, 8, stride=4)), nn.ReLU(),
            orthogonal(nn.Conv2d(c1, c2, 4, stride=2)), nn.ReLU(),
            orthogonal(nn.Conv2d(c2, c3, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(orthogonal(nn.Linear(c3 * conv_side(image_size) ** 2, feature_dim)), nn.ReLU())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(images))


class GaussianActor(nn.Module):
    """Features [B, F] -> Gaussian means float [B, C*A] (normalised action space, pre-squash)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(orthogonal(nn.Linear(in_dim, hidden)), nn.ReLU(),
                                 orthogonal(nn.Linear(hidden, out_dim), 0.01 * HIDDEN_GAIN))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp(features)


class ValueHead(nn.Module):
    """Critic in -> hidden -> out: in = the fused features (ppo_rgb's critic, sharing the encoders
    with the actor) or the privileged state (an asymmetric critic), which `normalize_input`
    standardises first with running statistics (raw simulator state mixes units)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, normalize_input: bool = False) -> None:
        super().__init__()
        self.input_norm = InputNormalizer(in_dim) if normalize_input else None
        self.mlp = nn.Sequential(orthogonal(nn.Linear(in_dim, hidden)), nn.ReLU(), orthogonal(nn.Linear(hidden, out_dim), 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x float [B, in] -> values float [B, out]."""
        return self.mlp(self.input_norm(x) if self.input_norm is not None else x)
