"""`actor.model` keys of `model_type: openvla_oft`, beside the model they configure.

The keys stay flat in `actor.model` (RLinf's layout); the loader builds this class when
`model_type` is openvla_oft. Defaults reproduce the official OpenVLA-OFT inference set-up.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from embodied_rl.config.schema.model import (
    ModelConfig,
    model_key_error,
    register_model_config,
)

if TYPE_CHECKING:
    import torch

    from embodied_rl.memory.params import ParamCounts
    from embodied_rl.models.checkpoint_spec import CheckpointSpec

ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")

# Every linear layer of the two ViTs, the projector and the Llama-style LLM, plus lm_head.
LORA_TARGETS = ["proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj", "lm_head"]


def flash_attention_runs_on(device: torch.device) -> bool:
    """Whether attn_implementation flash_attention_2 can run on `device` in this environment."""
    return device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None


@register_model_config("openvla_oft")
@dataclass
class OpenVLAOFTConfig(ModelConfig):
    attn_implementation: str = field(default="sdpa", metadata={"help": "LLM attention kernel: sdpa | eager | flash_attention_2 (CUDA + flash-attn only); all bidirectional."})
    center_crop: bool = field(default=True, metadata={"help": "Apply the OFT evaluation centre crop (90% of the area, resized back) before normalisation."})
    max_prompt_length: int = field(default=64, metadata={"help": "Prompt tokens (BOS..'▁') left-padded to this fixed length so rollout batches stack; longer prompts are an error."})
    append_stop_token: bool = field(default=True, metadata={"help": "End the sequence with '</s>' after the action slots (official OFT training layout); false = RLinf's layout without it."})
    attention_mode: str = field(default="bidirectional", metadata={"help": "bidirectional (OpenVLA-OFT's parallel decoding) | causal (only for checkpoints trained with a causal mask, e.g. by stock-transformers RLinf runs)."})
    lora_target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS), metadata={"help": "Module-name suffixes wrapped with LoRA (peft matching)."})
    action_bin_window: int = field(default=0, metadata={"help": "Sampling and its log-probs keep only the action bins within this many bins of each token's most likely bin (0: no window). Top-k keeps the most likely bins wherever they lie, which for a small policy includes far ones (actions that jump); the window keeps sampled actions near the greedy action. One bin is 2/256 of the normalised action range. Greedy decoding is unchanged."})
    top_k: int | None = field(default=None, metadata={"help": "Keep the k most likely of the 256 action bins before sampling (training rollouts and the sampled evaluation scoring; greedy decoding is unchanged); null = all bins."})
    logprobs_over: Literal["top_k", "all_bins"] = field(default="top_k", metadata={"help": "The policy whose log-probs training rollouts record and PPO/GRPO train (and a KL reference scores), with top_k set: top_k (the sampling policy, top_k bins renormalised: a sampled bin an update moves out of the top k gets log-prob -inf and no gradient, so nothing pulls it back) | all_bins (the temperature-scaled policy over all 256 bins: every sampled bin keeps its gradient; the ratio then leaves out the top-k renormalisation)."})

    @property
    def num_action_tokens(self) -> int:
        return self.action_dim * self.num_action_chunks

    @property
    def logprob_top_k(self) -> int:
        """The top_k of the log-probs training rollouts record and training scores (0 = all bins)."""
        return (self.top_k or 0) if self.logprobs_over == "top_k" else 0

    def validate(self) -> None:
        super().validate()
        if self.top_k is not None and not 1 <= self.top_k <= 256:
            raise model_key_error("top_k", f"must be in [1, 256] (action bins) or null, got {self.top_k}")
        if self.logprobs_over == "all_bins" and self.top_k is None:
            raise model_key_error("logprobs_over", "all_bins only differs from top_k when top_k is set; set actor.model.top_k or remove the key")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise model_key_error("attn_implementation", f"got {self.attn_implementation!r}, expected one of {', '.join(ATTN_IMPLEMENTATIONS)}")
        if self.attention_mode not in ("bidirectional", "causal"):
            raise model_key_error("attention_mode", f"got {self.attention_mode!r}, expected one of bidirectional, causal")
        if self.max_prompt_length < 1:
            raise model_key_error("max_prompt_length", f"must be >= 1, got {self.max_prompt_length}")
        if not 0 <= self.action_bin_window < 256:
            raise model_key_error("action_bin_window", f"must be in [0, 255] bins (0: no window), got {self.action_bin_window}")
        if not self.lora_target_modules:
            raise model_key_error("lora_target_modules", "must name at least one module")

    def cuda_half_precision_only(self) -> tuple[str, str] | None:
        if self.attn_implementation == "flash_attention_2":
            return "attn_implementation=flash_attention_2", "attn_implementation=sdpa"
        return None

    def runnable_on(self, device: torch.device) -> OpenVLAOFTConfig:
        # Every kernel computes the same bidirectional attention from the same weights.
        if self.attn_implementation == "flash_attention_2" and not flash_attention_runs_on(device):
            return dataclasses.replace(self, attn_implementation="sdpa")
        return self

    def checkpoint_spec(self) -> CheckpointSpec:
        from embodied_rl.models.openvla_oft.checkpoint_spec import read_checkpoint_spec

        return read_checkpoint_spec(self.model_path, self.unnorm_key)

    def preset_names(self) -> tuple[str, ...]:
        from embodied_rl.models.openvla_oft.presets import PRESETS

        return tuple(PRESETS)

    def preset_mismatch(self, name: str, image_size: int, path: str) -> str | None:
        from embodied_rl.models.openvla_oft.presets import preset_mismatch

        return preset_mismatch(name, image_size, path)

    def parameter_counts(self) -> ParamCounts | None:
        from embodied_rl.models.openvla_oft.size import parameter_counts

        return parameter_counts(self)

    def activation_bytes(self, env_cfg: Any, micro_batch: int, param_dtype: str) -> int | str:
        from embodied_rl.models.activations import activation_bytes

        return activation_bytes(self, env_cfg, micro_batch, param_dtype)
