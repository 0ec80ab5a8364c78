"""OpenVLA-OFT as an RL policy: processor, parallel decoding, log-probs, value head, checkpoints."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any

import torch
from torch import nn

from embodied_rl.errors import CheckpointError, ConfigError
from embodied_rl.models.base import BasePolicy, PolicyOutput, Scoring
from embodied_rl.models.generators import GeneratorLike
from embodied_rl.models.input_norm import PrivilegedCritic, privileged_input
from embodied_rl.models.openvla_oft import lora
from embodied_rl.models.openvla_oft import sampling as S
from embodied_rl.models.openvla_oft.actions import (
    STATS_NAME,
    ActionTokenizer,
    BoundsQ99,
    resolve_unnorm_key,
)
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.components import (
    PROPRIO_PROJECTOR,
    VALUE_HEAD,
)
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.heads import ProprioProjector, ValueHead
from embodied_rl.models.openvla_oft.modeling import (
    OpenVLAOFTModel,
)
from embodied_rl.models.openvla_oft.persistence import OFTCheckpointIO
from embodied_rl.models.openvla_oft.processor import ImageTransform, PromptTokenizer
from embodied_rl.models.registry import register_policy
from embodied_rl.types import EnvObservation


def tower_norm_stats(core: OpenVLAOFTModel) -> tuple[list, list]:
    """Per-tower (means, stds) the timm towers were pre-trained with (DINOv2: ImageNet, SigLIP: 0.5)."""
    towers = core.vision_backbone.towers
    return [list(t.pretrained_cfg["mean"]) for t in towers], [list(t.pretrained_cfg["std"]) for t in towers]


@register_policy("openvla_oft")
class OpenVLAOFTPolicy(OFTCheckpointIO, PrivilegedCritic, BasePolicy):
    """Inputs (batch-first): input_ids/attention_mask int64 [B, L] (left-padded, BOS first),
    images uint8 [B, 3*N_img, S, S] (resized cameras, normalised inside forward), proprio float32 [B, D] (normalised)."""

    def __init__(self, model_cfg: OpenVLAOFTConfig, arch: OpenVLAArchConfig, tokenizer: Any, stats: dict[str, Any],
                 image_norm: tuple[list, list] | None = None) -> None:
        """image_norm: per-tower (means, stds); None = the timm towers' own normalisation."""
        super().__init__()
        self.model_cfg, self.arch, self.tokenizer = model_cfg, arch, tokenizer
        if model_cfg.num_images_in_input > 2:
            raise ConfigError(f"actor.model.num_images_in_input={model_cfg.num_images_in_input}: environments provide at most 2 cameras (main + wrist)")
        if model_cfg.image_size is not None and model_cfg.image_size != arch.image_size:
            raise ConfigError(f"actor.model.image_size={model_cfg.image_size} but the checkpoint is built for {arch.image_size} px; set it to {arch.image_size} or null")
        if tokenizer.vocab_size != arch.base_vocab_size:
            raise CheckpointError(f"tokenizer vocab_size {tokenizer.vocab_size} != text_config.vocab_size - pad_to_multiple_of = {arch.base_vocab_size}; tokenizer and config.json disagree")
        self.vla: nn.Module = OpenVLAOFTModel(arch, num_images_in_input=model_cfg.num_images_in_input,
                                              attn_implementation=model_cfg.attn_implementation,
                                              causal=model_cfg.attention_mode == "causal")
        hidden = arch.llm_hidden_size
        self.proprio_projector = ProprioProjector(model_cfg.proprio_dim, hidden) if model_cfg.use_proprio else None
        privileged = model_cfg.value_input == "privileged_state"
        critic_in = model_cfg.privileged_state_dim if privileged else hidden
        self.value_head = ValueHead(critic_in, model_cfg.value_dim, normalize_input=privileged) if model_cfg.add_value_head else None
        self._use_statistics(stats, model_cfg.unnorm_key)
        self.action_tokenizer = ActionTokenizer(arch.base_vocab_size, arch.n_action_bins)
        self.prompt_tokenizer = PromptTokenizer(tokenizer, model_cfg.max_prompt_length, arch.pad_token_id)
        means, stds = image_norm or tower_norm_stats(self.vla)
        self.image_transform = ImageTransform(arch.image_size, means, stds, center_crop=model_cfg.center_crop)
        self.loaded_adapters = False  # set by _finish: LoRA adapters came with the checkpoint or lora_path
        images_made_for = arch.extra.get("num_images_in_input")
        if images_made_for is not None and images_made_for != model_cfg.num_images_in_input:
            raise ConfigError(f"actor.model.num_images_in_input={model_cfg.num_images_in_input} but this checkpoint was made for {images_made_for} camera(s)")

    def _use_statistics(self, stats: dict[str, Any], unnorm_key: str | None) -> None:
        model_cfg = self.model_cfg
        self.stats = stats
        self.unnorm_key = resolve_unnorm_key(stats, unnorm_key)
        self.action_norm = BoundsQ99(stats[self.unnorm_key]["action"], f"{self.unnorm_key}.action")
        if self.action_norm.dim != model_cfg.action_dim:
            raise ConfigError(f"actor.model.action_dim={model_cfg.action_dim} but {STATS_NAME}[{self.unnorm_key}] has {self.action_norm.dim}-d actions")
        self.proprio_norm = None
        if model_cfg.use_proprio:
            if "proprio" not in stats[self.unnorm_key]:
                raise ConfigError(f"actor.model.use_proprio=true but {STATS_NAME}[{self.unnorm_key}] has no 'proprio' statistics")
            self.proprio_norm = BoundsQ99(stats[self.unnorm_key]["proprio"], f"{self.unnorm_key}.proprio")
            if self.proprio_norm.dim != model_cfg.proprio_dim:
                raise ConfigError(f"actor.model.proprio_dim={model_cfg.proprio_dim} but {STATS_NAME}[{self.unnorm_key}] has {self.proprio_norm.dim}-d proprio")

    def set_dataset_statistics(self, stats: dict[str, Any]) -> None:
        """Replace the checkpoint's statistics with a single-entry `dataset_statistics` (e.g. SFT's,
        computed from its demos); saved checkpoints and exports carry it from then on."""
        if len(stats) != 1:
            raise ValueError(f"set_dataset_statistics: expected one entry, got {sorted(stats)}")
        self._use_statistics(stats, None)

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return self.action_norm.normalize(torch.as_tensor(actions)).reshape(actions.shape[0], -1)

    def record_actions(self, normalized: torch.Tensor) -> torch.Tensor:
        """int64 [N, C*A]: each normalised value's relative bin (the column of the action logits)."""
        return self.action_tokenizer.encode(normalized)

    # ----------------------------------------------------------------- inputs
    def prepare_inputs(self, obs: EnvObservation) -> dict[str, torch.Tensor]:
        n_img = self.model_cfg.num_images_in_input
        if len(obs.task_descriptions) != obs.num_envs:
            raise ValueError(f"EnvObservation has {obs.num_envs} images but {len(obs.task_descriptions)} task descriptions")
        images = [obs.main_images]
        if n_img >= 2:
            if obs.wrist_images is None:
                raise ConfigError(f"actor.model.num_images_in_input={n_img} but the env provides no wrist camera; set it to 1")
            images.append(obs.wrist_images)
        input_ids, attention_mask = self.prompt_tokenizer(obs.task_descriptions)
        out = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "images": torch.cat([self.image_transform(im) for im in images], dim=1),
        }
        if self.proprio_norm is not None:
            states = torch.as_tensor(obs.states, dtype=torch.float32)
            if states.shape[-1] != self.model_cfg.proprio_dim:
                raise ConfigError(f"actor.model.proprio_dim={self.model_cfg.proprio_dim} but the env state has {states.shape[-1]} dims")
            out["proprio"] = self.proprio_norm.normalize(states)
        if (privileged := privileged_input(self.model_cfg, obs)) is not None:
            out["privileged"] = privileged
        return out

    # ---------------------------------------------------------------- forward
    def pixel_values(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The official pixel_values float [B, 6*N_img, S, S] from the stored uint8 images."""
        dev = next(self.vla.parameters()).device
        return self.image_transform.normalize(inputs["images"].to(dev))

    def _logits_and_values(self, inputs: dict[str, torch.Tensor], compute_values: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        dev = next(self.vla.parameters()).device
        extra = None
        if self.proprio_projector is not None:
            if "proprio" not in inputs:
                raise ValueError("inputs lack 'proprio' but actor.model.use_proprio=true")
            proj_dtype = self.proprio_projector.fc1.weight.dtype
            extra = self.proprio_projector(inputs["proprio"].to(dev, proj_dtype)).unsqueeze(1)
        logits, hidden = self.vla(
            inputs["input_ids"].to(dev), inputs["attention_mask"].to(dev), self.pixel_values(inputs),
            self.model_cfg.num_action_tokens, extra, self.model_cfg.append_stop_token,
        )
        values = self.critic_values(hidden, inputs) if compute_values and self.value_head is not None else None
        return logits, values

    def critic_values(self, hidden: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """float [B, value_dim] from the readout hidden states [B, T, H] or the privileged state."""
        assert self.value_head is not None
        if self.model_cfg.value_input == "privileged_state":
            return self._state_values(inputs)
        # The hidden state just before the first action slot (the '▁' token) summarises the observation.
        return self.value_head(hidden[:, 0]).float()

    def _predict(self, inputs: dict[str, torch.Tensor], *, do_sample: bool, temperature: float,
                 compute_values: bool = True, generator: GeneratorLike = None) -> PolicyOutput:
        """The action record is int64 [B, C*A]: the sampled tokens as *relative* bins 0..255 (the
        column of the 256-wide action logits; absolute vocabulary id = base_vocab - 256 + bin);
        logprobs and entropy [B, C*A] are per token (L = C*A), drawn with model_cfg.top_k and
        scored under model_cfg.logprobs_over (sampling.sample_and_score_as)."""
        logits, values = self._logits_and_values(inputs, compute_values)
        tokens, logprobs, entropy, extra = S.sample_and_score_as(self.model_cfg, logits, do_sample=do_sample,
                                                                temperature=temperature, generator=generator)
        normed = self.action_tokenizer.decode(tokens).view(tokens.shape[0], self.model_cfg.num_action_chunks, self.model_cfg.action_dim)
        return PolicyOutput(
            actions=self.action_norm.unnormalize(normed),
            action_record=tokens,
            logprobs=logprobs,
            entropy=entropy,
            values=values,
            forward_inputs={**inputs, **extra},
        )

    def _evaluate(self, inputs: dict[str, torch.Tensor], *, action_record: torch.Tensor, temperature: float,
                  compute_values: bool = True, scoring: Scoring = "rollout") -> dict[str, torch.Tensor]:
        """scoring "rollout": the top_k of model_cfg.logprobs_over; "likelihood": all bins. The
        action_bin_window applies to both (demo tokens are scored under the window SFT trains with)."""
        logits, values = self._logits_and_values(inputs, compute_values)
        top_k = self.model_cfg.logprob_top_k if scoring == "rollout" else 0
        processed = S.process_logits(logits, temperature, top_k, self.model_cfg.action_bin_window, inputs.get(S.WINDOW_CENTER))
        tokens = action_record.to(processed.device).long()
        # clone(): FSDP2 warns on view outputs (an in-place op on them would skip its backward hook).
        return {"logprobs": S.token_logprobs(processed, tokens).clone(), "entropy": S.token_entropy(processed), "values": values}

    # ---------------------------------------------------------- weights / FSDP
    def _trainable_keys(self) -> list[str]:
        keys = list(self.state_dict())
        if not self.model_cfg.is_lora:
            return keys
        return [k for k in keys if ("lora_" in k and not lora.is_reference_key(k))
                or k.startswith((f"{VALUE_HEAD}.", f"{PROPRIO_PROJECTOR}."))]

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        sd = self.state_dict()
        return {k: sd[k].detach() for k in self._trainable_keys()}

    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        expected = set(self._trainable_keys())
        if set(sd) != expected:
            missing, extra = sorted(expected - set(sd)), sorted(set(sd) - expected)
            raise ValueError(f"trainable state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]} (is_lora/add_value_head must match on both sides)")
        self.load_state_dict(sd, strict=False)

    # ---------------------------------------------------------- KL reference
    def reference_view(self) -> Callable[[], AbstractContextManager[None]] | None:
        """Under LoRA, score as the policy is now while sharing its base weights.

        Training changes only the adapters and the parts outside the LoRA-wrapped core. Fresh
        adapters start with B = 0, so the starting policy is the base with adapters disabled;
        adapters loaded with the checkpoint (or lora_path) are part of the starting policy, so a
        frozen copy of them (adapter-sized) is scored instead of the base. The proprio projector
        is trained too: it gets a frozen copy. The value head plays no part in log-probs."""
        if not self.model_cfg.is_lora:
            return None  # full fine-tuning moves every weight: only a second model keeps the start
        if self.loaded_adapters:
            lora.freeze_starting_adapters(self.vla)
        proprio = None if self.proprio_projector is None else copy.deepcopy(self.proprio_projector).requires_grad_(False)
        return partial(self._as_reference, proprio)

    @contextmanager
    def _as_reference(self, proprio: ProprioProjector | None) -> Iterator[None]:
        trained = self.proprio_projector
        self.proprio_projector = proprio
        try:
            with lora.starting_adapters(self.vla):
                yield
        finally:
            self.proprio_projector = trained

    def fsdp_units(self) -> list[nn.Module]:
        core = lora.unwrap(self.vla)
        # The projector stays in the root unit: its Linear on [B, S, D] returns a view, which FSDP2
        # warns about for units (unsafe under in-place ops); the root is gathered for the embeddings anyway.
        units: list[nn.Module] = [b for t in core.vision_backbone.towers for b in t.blocks]
        units += list(core.language_model.model.layers)
        units += [m for m in (self.proprio_projector, self.value_head) if m is not None]
        return units


__all__ = ["OpenVLAOFTPolicy", "tower_norm_stats"]
