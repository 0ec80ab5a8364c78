"""A pixel Gaussian policy as an RL policy: ManiSkill's ppo_rgb network, a chunk of C actions per
forward pass, a learned state-independent log-std, an optional (asymmetric) critic.

The action record is the raw Gaussian sample u float [B, C*A] in the normalised action space; the
env gets squash(u) (clip or tanh to [-1, 1]) un-normalised with the checkpoint's statistics.
Log-probs and entropies are per dimension [B, C*A] (L = C*A), so the runtime's action_level
grouping sums an action's A dimensions into its joint log-prob.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from embodied_rl.errors import ConfigError
from embodied_rl.models.base import BasePolicy, PolicyOutput, Scoring
from embodied_rl.models.cnn_gaussian import gaussian as G
from embodied_rl.models.cnn_gaussian.arch import CNNGaussianArch
from embodied_rl.models.cnn_gaussian.configuration import CNNGaussianConfig
from embodied_rl.models.cnn_gaussian.network import (
    GaussianActor,
    NatureCNN,
    ValueHead,
    orthogonal,
)
from embodied_rl.models.cnn_gaussian.persistence import CheckpointIO
from embodied_rl.models.cnn_gaussian.statistics import Bounds, pick_entry
from embodied_rl.models.generators import GeneratorLike
from embodied_rl.models.input_norm import PrivilegedCritic, privileged_input
from embodied_rl.models.registry import register_policy
from embodied_rl.types import EnvObservation


def check_fits(cfg: CNNGaussianConfig, arch: CNNGaussianArch) -> None:
    """One-line ConfigError where actor.model's keys describe another model than the checkpoint's."""
    def refuse(key: str, want: Any, have: Any, what: str) -> None:
        raise ConfigError(f"actor.model.{key}={want} but the checkpoint {what} {have}; set actor.model.{key}={have}")

    if cfg.image_size is not None and cfg.image_size != arch.image_size:
        refuse("image_size", cfg.image_size, arch.image_size, "takes images of side")
    if cfg.num_images_in_input != arch.num_images_in_input:
        refuse("num_images_in_input", cfg.num_images_in_input, arch.num_images_in_input, "was made for cameras:")
    if cfg.action_dim != arch.action_dim:
        refuse("action_dim", cfg.action_dim, arch.action_dim, f"outputs {arch.num_action_chunks} x A actions with A =")
    if cfg.num_action_chunks != arch.num_action_chunks:
        refuse("num_action_chunks", cfg.num_action_chunks, arch.num_action_chunks, f"outputs C x {arch.action_dim} actions with C =")
    if cfg.use_proprio != (arch.state_dim > 0):
        refuse("use_proprio", cfg.use_proprio, arch.state_dim > 0, "reads the state:")
    if cfg.use_proprio and cfg.proprio_dim != arch.state_dim:
        refuse("proprio_dim", cfg.proprio_dim, arch.state_dim, "reads a state of size")
    if cfg.squash != arch.squash:
        refuse("squash", cfg.squash, arch.squash, "was trained with squash")
    for key, want in cfg.arch_overrides().items():
        if want != getattr(arch, key):
            refuse(key, want, getattr(arch, key), "has")


@register_policy("cnn_gaussian")
class CNNGaussianPolicy(CheckpointIO, PrivilegedCritic, BasePolicy):
    """Inputs (batch-first): images uint8 [B, 3*N_img, S, S]; states float32 [B, D] (normalised,
    with use_proprio); privileged float32 [B, P] (asymmetric critic only)."""

    def __init__(self, model_cfg: CNNGaussianConfig, arch: CNNGaussianArch, stats: dict[str, Any]) -> None:
        super().__init__()
        check_fits(model_cfg, arch)
        self.model_cfg, self.arch = model_cfg, arch
        self.encoder = NatureCNN(3 * arch.num_images_in_input, arch.cnn_channels, arch.image_size, arch.image_feature_dim)
        self.state_mlp = nn.Sequential(orthogonal(nn.Linear(arch.state_dim, arch.state_feature_dim)), nn.ReLU()) if arch.state_dim else None
        fused = arch.image_feature_dim + (arch.state_feature_dim if arch.state_dim else 0)
        self.actor_mean = GaussianActor(fused, arch.head_hidden_dim, arch.action_width)
        self.log_std = nn.Parameter(torch.full((arch.action_width,), float(model_cfg.log_std_init)))
        privileged = model_cfg.value_input == "privileged_state"
        self.value_head = (ValueHead(model_cfg.privileged_state_dim if privileged else fused, arch.head_hidden_dim, model_cfg.value_dim,
                                     normalize_input=privileged) if model_cfg.add_value_head else None)
        self._use_statistics(stats, model_cfg.unnorm_key)

    # ------------------------------------------------------------ statistics
    def _use_statistics(self, stats: dict[str, Any], unnorm_key: str | None) -> None:
        key = pick_entry(stats, unnorm_key)
        self.stats, self.unnorm_key = stats, key
        self.action_norm = Bounds(stats[key].get("action"), f"{key}.action", self.arch.action_dim, "action_dim")
        self.state_norm = None
        if self.arch.state_dim:
            self.state_norm = Bounds(stats[key].get("proprio"), f"{key}.proprio", self.arch.state_dim, "proprio_dim")

    def set_dataset_statistics(self, stats: dict[str, Any]) -> None:
        """Adopt a single-entry `dataset_statistics` (e.g. SFT's, from its demos); saved checkpoints carry it."""
        if len(stats) != 1:
            raise ValueError(f"set_dataset_statistics: expected one entry, got {sorted(stats)}")
        self._use_statistics(stats, None)

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        actions = torch.as_tensor(actions, dtype=torch.float32)
        return self.action_norm.normalize(actions).reshape(actions.shape[0], -1)

    def record_actions(self, normalized: torch.Tensor) -> torch.Tensor:
        """float [N, C*A]: the Gaussian sample that squashes to each normalised action."""
        return G.unsquash(normalized, self.arch.squash)

    # ----------------------------------------------------------------- inputs
    def _camera(self, images: Any) -> torch.Tensor:
        """uint8 [B, H, W, 3] -> uint8 [B, 3, S, S] (resized with antialiasing where H, W != S)."""
        x = torch.as_tensor(images).permute(0, 3, 1, 2)
        side = self.arch.image_size
        if tuple(x.shape[-2:]) != (side, side):
            x = F.interpolate(x.float(), size=(side, side), mode="bilinear", antialias=True, align_corners=False)
            x = x.round().clamp(0, 255).to(torch.uint8)
        return x.contiguous()

    def prepare_inputs(self, obs: EnvObservation) -> dict[str, torch.Tensor]:
        n_img = self.arch.num_images_in_input
        cameras = [obs.main_images]
        if n_img >= 2:
            if obs.wrist_images is None:
                raise ConfigError(f"actor.model.num_images_in_input={n_img} but the env provides no wrist camera; set it to 1")
            cameras.append(obs.wrist_images)
        out = {"images": torch.cat([self._camera(c) for c in cameras], dim=1)}
        if self.state_norm is not None:
            states = torch.as_tensor(obs.states, dtype=torch.float32)
            if states.shape[-1] != self.arch.state_dim:
                raise ConfigError(f"actor.model.proprio_dim={self.arch.state_dim} but the env state has {states.shape[-1]} values; "
                                  f"use a checkpoint made for {states.shape[-1]}")
            out["states"] = self.state_norm.normalize(states)
        if (privileged := privileged_input(self.model_cfg, obs)) is not None:
            out["privileged"] = privileged
        return out

    # ---------------------------------------------------------------- forward
    def _features(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """float [B, F]: image features, then state features when the policy reads the state."""
        weight = self.actor_mean.mlp[0].weight
        x = inputs["images"].to(weight.device, weight.dtype) / 255.0
        feats = self.encoder(x)
        if self.state_mlp is not None:
            if "states" not in inputs:
                raise ValueError("inputs lack 'states' but actor.model.use_proprio=true")
            feats = torch.cat([feats, self.state_mlp(inputs["states"].to(weight.device, weight.dtype))], dim=-1)
        return feats

    def _values(self, feats: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        assert self.value_head is not None
        if self.model_cfg.value_input == "privileged_state":
            return self._state_values(inputs)
        return self.value_head(feats).float()

    def _score(self, inputs: dict[str, torch.Tensor], temperature: float, compute_values: bool
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(means float [B, C*A], std float [C*A], values or None)."""
        feats = self._features(inputs)
        values = self._values(feats, inputs) if compute_values and self.value_head is not None else None
        return self.actor_mean(feats).float(), G.std_of(self.log_std, temperature), values

    def _predict(self, inputs: dict[str, torch.Tensor], *, do_sample: bool, temperature: float = 1.0,
                 compute_values: bool = True, generator: GeneratorLike = None) -> PolicyOutput:
        """u ~ N(mean, (std * temperature)^2) (the mean when not sampling); actions float [B, C, A]."""
        mean, std, values = self._score(inputs, temperature, compute_values)
        u = G.sample(mean, std, do_sample, generator)
        normed = G.squash_action(u, self.arch.squash).view(u.shape[0], self.arch.num_action_chunks, self.arch.action_dim)
        return PolicyOutput(actions=self.action_norm.unnormalize(normed), action_record=u,
                            logprobs=G.log_prob(u, mean, std, self.arch.squash), entropy=G.entropy(std, u.shape[0]),
                            values=values, forward_inputs=dict(inputs))

    def _evaluate(self, inputs: dict[str, torch.Tensor], *, action_record: torch.Tensor, temperature: float = 1.0,
                  compute_values: bool = True, scoring: Scoring = "rollout") -> dict[str, torch.Tensor]:
        """Both scorings are the one Gaussian (rollouts sample it untruncated) at `temperature`."""
        mean, std, values = self._score(inputs, temperature, compute_values)
        u = action_record.to(mean.device, torch.float32)
        return {"logprobs": G.log_prob(u, mean, std, self.arch.squash), "entropy": G.entropy(std, u.shape[0]), "values": values}

    # ---------------------------------------------------------- weights / FSDP
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.state_dict().items()}

    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        expected = set(self.state_dict())
        if set(sd) != expected:
            missing, extra = sorted(expected - set(sd)), sorted(set(sd) - expected)
            raise ValueError(f"trainable state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]} (add_value_head must match on both sides)")
        self.load_state_dict(sd, strict=True)

    def fsdp_units(self) -> list[nn.Module]:
        return [m for m in (self.encoder, self.value_head) if m is not None]


__all__ = ["CNNGaussianPolicy", "check_fits"]
