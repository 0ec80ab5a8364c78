"""Small MLPs around the LLM: vision projector, proprio projector, value head."""
from __future__ import annotations

import torch
from torch import nn

from embodied_rl.models.input_norm import InputNormalizer


class PrismaticProjector(nn.Module):
    """Vision features -> LLM embeddings. Fused: fc1 (4x), GELU, fc2, GELU, fc3; else fc1, GELU, fc2."""

    def __init__(self, use_fused: bool, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.use_fused = use_fused
        if use_fused:
            self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
            self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
            self.fc3 = nn.Linear(llm_dim, llm_dim)
        else:
            self.fc1 = nn.Linear(vision_dim, llm_dim)
            self.fc2 = nn.Linear(llm_dim, llm_dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc2(self.act(self.fc1(x)))
        return self.fc3(self.act(x)) if self.use_fused else x


class ProprioProjector(nn.Module):
    """Normalised proprio state [B, D] -> one LLM token [B, H] (official OFT: fc1, GELU, fc2)."""

    def __init__(self, proprio_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.fc2 = nn.Linear(llm_dim, llm_dim)
        self.act_fn1 = nn.GELU()

    def reset_parameters(self) -> None:
        self.fc1.reset_parameters()
        self.fc2.reset_parameters()

    def forward(self, proprio: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act_fn1(self.fc1(proprio)))


class ValueHead(nn.Module):
    """Critic MLP in -> 512 -> 128 -> out (no last bias); its input is the hidden state before the
    first action slot (in = H) or, for an asymmetric critic, the privileged state (in = P), which
    `normalize_input` standardises first: raw simulator state mixes radians, metres and velocities.

    Parameter names (`mlp.0/2/4`) match RLinf's ValueHead, so critics trained there load.
    """

    def __init__(self, hidden_size: int, out_dim: int, normalize_input: bool = False) -> None:
        super().__init__()
        self.input_norm = InputNormalizer(hidden_size) if normalize_input else None
        self.mlp = nn.Sequential(
            nn.Linear(hidden_size, 512), nn.GELU(), nn.Linear(512, 128), nn.GELU(), nn.Linear(128, out_dim, bias=False)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming for the hidden layers; N(0, 0.02) for the output so initial values are near 0."""
        for layer in (self.mlp[0], self.mlp[2]):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
        nn.init.normal_(self.mlp[4].weight, std=0.02)
        if self.input_norm is not None:
            self.input_norm.reset()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.input_norm(h) if self.input_norm is not None else h)
