"""Processor: EnvObservation -> model inputs (pixel_values, prompt ids, proprio).

Images: uint8 HWC -> optional OFT centre crop (90% of the area) -> resize to the model
size (bicubic, antialiased, kept uint8) -> cameras concatenated on channels (third-person,
wrist); in the forward pass, one normalisation per vision tower, stacked on channels per
camera (DINOv2 first, then SigLIP), giving the official 6-channels-per-image pixel values.
Prompts: the OFT template, tokenised with BOS, '▁' appended, left-padded to a fixed
length with BOS moved to index 0, so batches from different steps stack.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from embodied_rl.errors import ConfigError

PROMPT_TEMPLATE = "In: What action should the robot take to {}?\nOut:"
OFT_CROP_AREA = 0.9


def prompt_for(instruction: str) -> str:
    return PROMPT_TEMPLATE.format(instruction.lower())


class ImageTransform:
    """Camera frames -> model-size uint8 images, and uint8 images -> per-tower normalised floats.

    The two steps are split so rollouts store uint8 images (8x smaller than the 6-channel float
    pixel values) and the normalisation runs inside the forward pass, as in the official
    processor (resize in uint8, then normalise).
    """

    def __init__(self, image_size: int, means: Sequence[Sequence[float]], stds: Sequence[Sequence[float]], center_crop: bool) -> None:
        self.image_size = int(image_size)
        self.means = torch.tensor(means, dtype=torch.float32, device="cpu").reshape(-1, 1, 3, 1, 1)
        self.stds = torch.tensor(stds, dtype=torch.float32, device="cpu").reshape(-1, 1, 3, 1, 1)
        self.center_crop = center_crop

    def __call__(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        """uint8 [N, H, W, 3] -> uint8 [N, 3, S, S] (optional OFT centre crop, bicubic antialiased resize)."""
        x = torch.as_tensor(np.ascontiguousarray(images) if isinstance(images, np.ndarray) else images)
        if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"images must be uint8 [N, H, W, 3], got {tuple(x.shape)} {x.dtype}")
        x = x.permute(0, 3, 1, 2)
        if self.center_crop:
            # Same crop as OFT's random-crop training augmentation at evaluation: sqrt(0.9) of each side.
            h, w = x.shape[-2:]
            ch, cw = round(h * math.sqrt(OFT_CROP_AREA)), round(w * math.sqrt(OFT_CROP_AREA))
            top, left = (h - ch) // 2, (w - cw) // 2
            x = x[..., top: top + ch, left: left + cw]
        if tuple(x.shape[-2:]) != (self.image_size, self.image_size):
            y = F.interpolate(x.float(), size=(self.image_size, self.image_size), mode="bicubic", antialias=True, align_corners=False)
            x = y.round().clamp(0, 255).to(torch.uint8)
        return x.contiguous()

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3*N_img, S, S] -> float32 [B, 3*towers*N_img, S, S]: per camera, one normalised copy per tower."""
        b, c, h, w = images.shape
        x = images.float().div(255.0).view(b, c // 3, 1, 3, h, w)  # [B, cams, 1, 3, S, S]
        means = self.means.to(images.device).view(1, 1, -1, 3, 1, 1)
        stds = self.stds.to(images.device).view(1, 1, -1, 3, 1, 1)
        return ((x - means) / stds).reshape(b, -1, h, w)


class PromptTokenizer:
    """Instructions -> left-padded (input_ids, attention_mask) int64 [B, max_prompt_length]."""

    def __init__(self, tokenizer, max_prompt_length: int, pad_token_id: int) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = int(max_prompt_length)
        self.pad_token_id = int(pad_token_id)
        self.bos_id = tokenizer.bos_token_id
        self.empty_id = tokenizer.convert_tokens_to_ids("▁")
        if self.bos_id is None or self.empty_id is None or self.empty_id == tokenizer.unk_token_id:
            raise ConfigError("tokenizer needs a BOS token and the standalone '▁' token (Llama conventions)")

    def encode(self, instruction: str) -> list[int]:
        ids = list(self.tokenizer(prompt_for(instruction), add_special_tokens=True)["input_ids"])
        if not ids or ids[0] != self.bos_id:
            ids = [self.bos_id] + ids
        if ids[-1] != self.empty_id:
            ids.append(self.empty_id)
        return ids

    def __call__(self, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        n, length = len(instructions), self.max_prompt_length
        input_ids = torch.full((n, length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, length), dtype=torch.long)
        for i, text in enumerate(instructions):
            ids = self.encode(text)
            if len(ids) > length:
                raise ConfigError(
                    f"actor.model.max_prompt_length={length} is too short for a {len(ids)}-token prompt ({text[:40]!r}); raise it"
                )
            # BOS at index 0, padding after it, prompt right-aligned (RLinf's layout).
            input_ids[i, 0], mask[i, 0] = ids[0], 1
            input_ids[i, length - len(ids) + 1:] = torch.tensor(ids[1:], dtype=torch.long)
            mask[i, length - len(ids) + 1:] = 1
        return input_ids, mask
