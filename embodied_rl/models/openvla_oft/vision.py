"""Fused DINOv2 + SigLIP vision backbone with the official parameter names.

Each tower is a timm ViT built with `pretrained=False` (weights come from the checkpoint).
Features are the output of the second-to-last block without the final norm and without
prefix (CLS/register) tokens, as the official model does; the towers are concatenated on
the feature axis and the patches of the N cameras on the sequence axis.
"""
from __future__ import annotations

from typing import Any

import timm
import torch
from torch import nn

from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig


class LayerScale(nn.Module):
    """timm's LayerScale with its parameter named `scale_factor` (the official checkpoint key)."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.scale_factor = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale_factor


def _rename_layer_scales(model: nn.Module) -> None:
    """Swap timm LayerScale (param `gamma`) for ours (param `scale_factor`), keeping values."""
    for block in getattr(model, "blocks", []):
        for name in ("ls1", "ls2"):
            ls = getattr(block, name, None)
            if isinstance(ls, timm.layers.LayerScale):
                new = LayerScale(ls.gamma.shape[0])
                with torch.no_grad():
                    new.scale_factor.copy_(ls.gamma)
                setattr(block, name, new)


def build_tower(timm_id: str, image_size: int, overrides: dict[str, Any] | None, act_layer: str | None = None) -> nn.Module:
    kwargs = dict(overrides or {})
    if act_layer is not None:  # official `timm_override_act_layers` (e.g. quick_gelu for CLIP towers)
        kwargs["act_layer"] = act_layer
    model = timm.create_model(timm_id, pretrained=False, num_classes=0, img_size=image_size, **kwargs)
    _rename_layer_scales(model)
    return model


class FusedVisionBackbone(nn.Module):
    """pixel_values [B, 6*N_img, S, S] (or 3*N_img unfused) -> patch features [B, N_img*P, D_vis]."""

    def __init__(self, cfg: OpenVLAArchConfig, num_images_in_input: int = 1) -> None:
        super().__init__()
        overrides = cfg.timm_override_args or [None] * len(cfg.timm_model_ids)
        acts = cfg.timm_override_act_layers or [None] * len(cfg.timm_model_ids)
        self.use_fused = cfg.use_fused_vision_backbone
        self.featurizer = build_tower(cfg.timm_model_ids[0], cfg.image_sizes[0], overrides[0], acts[0])
        if self.use_fused:
            self.fused_featurizer = build_tower(cfg.timm_model_ids[1], cfg.image_sizes[1], overrides[1], acts[1])
        self.num_images_in_input = num_images_in_input

    @property
    def towers(self) -> list[nn.Module]:
        return [self.featurizer, self.fused_featurizer] if self.use_fused else [self.featurizer]

    @property
    def embed_dim(self) -> int:
        return sum(int(t.embed_dim) for t in self.towers)

    @property
    def num_patches_per_image(self) -> int:
        return int(self.featurizer.patch_embed.num_patches)

    @property
    def channels_per_image(self) -> int:
        return 3 * len(self.towers)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for tower in self.towers:
            tower.set_grad_checkpointing(enable)

    @staticmethod
    def _features(tower: nn.Module, images: torch.Tensor) -> torch.Tensor:
        # = get_intermediate_layers(n={second-to-last block}) as the official model calls it, but
        # stop_early skips the last block, whose output is discarded anyway.
        (feats,) = tower.forward_intermediates(
            images, indices=[len(tower.blocks) - 2], return_prefix_tokens=False, norm=False,
            output_fmt="NLC", intermediates_only=True, stop_early=True,
        )
        return feats

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        c = self.channels_per_image
        if pixel_values.shape[1] != c * self.num_images_in_input:
            raise ValueError(
                f"pixel_values has {pixel_values.shape[1]} channels, expected {c} x num_images_in_input={self.num_images_in_input}"
            )
        per_image = []
        for img in torch.split(pixel_values, c, dim=1):
            # Channels 0-2 are normalised for the first tower (DINOv2), 3-5 for the second (SigLIP).
            per_image.append(torch.cat([self._features(t, img[:, 3 * i: 3 * i + 3]) for i, t in enumerate(self.towers)], dim=2))
        return torch.cat(per_image, dim=1)
