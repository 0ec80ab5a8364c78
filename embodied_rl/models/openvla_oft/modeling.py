"""OpenVLA-OFT core network with the official parameter names, and parallel action decoding.

Sequence fed to the LLM (left padding, BOS first, as RLinf lays it out):
    [BOS] [N_img*P patches] [extra tokens, e.g. proprio] [PAD..] prompt[1:] .. '▁' [T zeroed action slots] [</s>?]
Attention is fully bidirectional: every query sees every non-pad key (OpenVLA-OFT's
parallel decoding was trained that way); `causal=True` exists only for checkpoints that
were trained with a causal mask. Position ids count only non-pad tokens, so the
output does not depend on how much left padding a sample got.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from embodied_rl.errors import ConfigError
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.configuration import flash_attention_runs_on
from embodied_rl.models.openvla_oft.heads import PrismaticProjector
from embodied_rl.models.openvla_oft.vision import FusedVisionBackbone


def check_attn_implementation(name: str, device: torch.device) -> None:
    """flash_attention_2 only where it can really run; never fall back to another kernel silently."""
    if name != "flash_attention_2":
        return
    if not flash_attention_runs_on(device):
        raise ConfigError(
            "actor.model.attn_implementation=flash_attention_2 needs a CUDA device and the flash-attn package; use sdpa instead"
        )


def attention_mask_4d(token_mask: torch.Tensor, dtype: torch.dtype, causal: bool = False) -> torch.Tensor:
    """bool [B, S] (True = real token) -> additive float [B, 1, S, S]: 0 where a query may attend,
    dtype-min on pad keys (and, when causal, on later keys).

    A float (not bool) mask because eager attention *adds* the mask to the scores.
    """
    b, s = token_mask.shape
    blocked = ~token_mask[:, None, None, :]
    if causal:
        later = torch.ones(s, s, dtype=torch.bool, device=token_mask.device).triu(1)
        blocked = blocked | later
    keys = torch.zeros(b, 1, 1, s, dtype=dtype, device=token_mask.device)
    return keys.masked_fill(blocked, torch.finfo(dtype).min).expand(b, 1, s, s)


class OpenVLAOFTModel(nn.Module):
    """vision_backbone + projector + language_model; returns action-bin logits and the readout hidden states."""

    def __init__(self, arch: OpenVLAArchConfig, *, num_images_in_input: int = 1, attn_implementation: str = "sdpa",
                 causal: bool = False) -> None:
        super().__init__()
        self.arch = arch
        self.vision_backbone = FusedVisionBackbone(arch, num_images_in_input)
        self.projector = PrismaticProjector(arch.use_fused_vision_backbone, self.vision_backbone.embed_dim, arch.llm_hidden_size)
        text_config = arch.llama_config()
        # Built directly in the default dtype (from_preset sets bf16 for a bf16 model): left to the
        # config, the LLM would be built in fp32 first, twice the memory of the 7B in bf16.
        self.language_model = AutoModelForCausalLM.from_config(text_config, attn_implementation=attn_implementation,
                                                               dtype=torch.get_default_dtype())
        self.attn_implementation = attn_implementation
        self.causal = causal  # only for checkpoints trained causally; OFT itself is bidirectional
        eos = text_config.eos_token_id  # '</s>' = 2 in the Llama vocabulary
        self.stop_token_id = int(eos[0] if isinstance(eos, list) else eos)
        self.n_bins = arch.n_action_bins
        self.base_vocab_size = arch.base_vocab_size

    def rebuild_buffers(self) -> None:
        """Recreate non-persistent buffers (RoPE frequencies), which checkpoints do not hold, on the CPU."""
        lm = self.language_model.model
        lm.rotary_emb = type(lm.rotary_emb)(config=lm.config)

    @property
    def hidden_size(self) -> int:
        return self.arch.llm_hidden_size

    def build_sequence(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pixel_values: torch.Tensor,
        num_action_tokens: int,
        extra_tokens: torch.Tensor | None,
        append_stop_token: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> inputs_embeds [B, S, H], token mask bool [B, S]."""
        embed = self.language_model.get_input_embeddings()
        text = embed(input_ids)
        patches = self.projector(self.vision_backbone(pixel_values.to(text.dtype)))
        b, dev = input_ids.shape[0], input_ids.device
        parts = [text[:, :1], patches]
        if extra_tokens is not None:
            parts.append(extra_tokens.to(text.dtype))
        # Action slots carry zero embeddings: the model reads them out in parallel, nothing leaks in.
        parts += [text[:, 1:], text.new_zeros(b, num_action_tokens, text.shape[-1])]
        if append_stop_token:
            parts.append(embed(torch.full((b, 1), self.stop_token_id, device=dev, dtype=torch.long)))
        embeds = torch.cat(parts, dim=1)
        n_prefix = embeds.shape[1] - input_ids.shape[1] - num_action_tokens - int(append_stop_token)
        am = attention_mask.bool()
        mask = torch.cat([am[:, :1], am.new_ones(b, n_prefix), am[:, 1:], am.new_ones(b, num_action_tokens + int(append_stop_token))], dim=1)
        return embeds, mask

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pixel_values: torch.Tensor,
        num_action_tokens: int,
        extra_tokens: torch.Tensor | None = None,
        append_stop_token: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass over the whole sequence.

        input_ids/attention_mask: int64 [B, L] left-padded prompts, BOS at index 0.
        pixel_values: float [B, 6*N_img, S, S]. extra_tokens: [B, n, H] or None.
        Returns (logits float [B, T, n_bins] over the action bins in relative order,
        hidden float [B, T, H] at the T readout positions: the one before each action slot).
        """
        embeds, mask = self.build_sequence(input_ids, attention_mask, pixel_values, num_action_tokens, extra_tokens, append_stop_token)
        return self.decode_actions(embeds, mask, num_action_tokens, append_stop_token)

    def decode_actions(
        self, embeds: torch.Tensor, mask: torch.Tensor, num_action_tokens: int, append_stop_token: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Bidirectional LLM pass over a built sequence (embeds [B, S, H], mask bool [B, S]) -> (logits, hidden)."""
        position_ids = (mask.long().cumsum(dim=1) - 1).clamp(min=0)
        if self.attn_implementation == "flash_attention_2":
            # FA2 takes the 2-D padding mask; is_causal selects bidirectional or causal kernels.
            attn = mask.long()
        else:
            attn = attention_mask_4d(mask, embeds.dtype, self.causal)
        out = self.language_model.model(
            inputs_embeds=embeds, attention_mask=attn, position_ids=position_ids, is_causal=self.causal, use_cache=False
        )
        end = embeds.shape[1] - int(append_stop_token)  # one past the last action slot
        # HF shift: position t predicts token t+1, so slot j is read at (slot j position - 1).
        hidden = out.last_hidden_state[:, end - num_action_tokens - 1: end - 1]
        logits = self.language_model.lm_head(hidden)
        first = self.base_vocab_size - self.n_bins
        return logits[..., first: self.base_vocab_size], hidden
