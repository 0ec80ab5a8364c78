"""Running standardisation of an input vector, shared by the policies' asymmetric critics."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from embodied_rl.errors import ConfigError
from embodied_rl.moments import merge_moments
from embodied_rl.types import EnvObservation


class InputNormalizer(nn.Module):
    """Running mean and variance of an input vector, and the input standardised with them and
    clipped to +-clip. The statistics are buffers, so they are saved, synced to the rollout and
    loaded with the weights; they change only through `update` (whole training batches), never
    in forward, so the rollout and the update compute the same function of the input."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros(()))

    @torch.no_grad()
    def reset(self) -> None:
        """No statistics yet: the identity until the first update."""
        self.mean.zero_()
        self.var.fill_(1.0)
        self.count.zero_()

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of x [..., dim] into the statistics."""
        x = x.reshape(-1, self.mean.shape[0]).to(self.mean)
        if x.shape[0] == 0:
            return
        count, mean, var = merge_moments(self.count, self.mean, self.var, float(x.shape[0]), x.mean(0), x.var(0, unbiased=False))
        self.count.copy_(count)
        self.mean.copy_(mean)
        self.var.copy_(var)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean.to(x.dtype)) / torch.sqrt(self.var.to(x.dtype) + self.eps)).clamp(-self.clip, self.clip)


def privileged_input(model_cfg: Any, obs: EnvObservation) -> torch.Tensor | None:
    """The asymmetric critic's input float [N, P] from `obs` (None when the policy's critic reads
    its own features, or the env gives no privileged state, e.g. in evaluation), its size checked
    against actor.model.privileged_state_dim."""
    if model_cfg.value_input != "privileged_state" or obs.privileged_states is None:
        return None
    privileged = torch.as_tensor(obs.privileged_states, dtype=torch.float32)
    if privileged.shape[-1] != model_cfg.privileged_state_dim:
        raise ConfigError(f"actor.model.privileged_state_dim={model_cfg.privileged_state_dim} but the env's privileged state "
                          f"has {privileged.shape[-1]} values; set it to {privileged.shape[-1]}")
    return privileged


class PrivilegedCritic:
    """What a policy whose `value_head` (an MLP `.mlp` with an optional `.input_norm`) may read the
    privileged state shares with every such policy: the values from that state alone, and the
    running statistics of its input. Mixed in before BasePolicy."""

    value_head: Any
    model_cfg: Any

    def _state_values(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.value_head is None or self.model_cfg.value_input != "privileged_state":
            raise ConfigError("state values need the asymmetric critic: set actor.model.add_value_head=true and value_input=privileged_state")
        if "privileged" not in inputs:
            raise ConfigError("actor.model.value_input=privileged_state but the observation has no privileged state; "
                              "set env.train.init_params.privileged_state=true")
        weight = self.value_head.mlp[0].weight
        return self.value_head(inputs["privileged"].to(weight.device, weight.dtype)).float()

    def observe_training_batch(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """The asymmetric critic's input statistics take in the batch's privileged states."""
        if self.value_head is not None and self.value_head.input_norm is not None and "privileged" in forward_inputs:
            self.value_head.input_norm.update(forward_inputs["privileged"])
