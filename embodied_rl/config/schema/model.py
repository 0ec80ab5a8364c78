"""Schema of `actor.model` (owned by embodied_rl/models).

Key names follow RLinf's embodied `actor.model` section where the concept exists. The
architecture's dimensions (vision towers, LLM, vocabulary) are never configured here: they
come from the checkpoint's config.json. Keys that describe the checkpoint (image_size,
num_images_in_input, action_dim x num_action_chunks) are checked against it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from embodied_rl.errors import ConfigError

VALUE_TYPES = ("chunk_level", "action_level")
PRECISIONS = ("fp32", "bf16", "fp16")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
ATTENTION_MODES = ("bidirectional", "causal")


@dataclass
class CreatePresetConfig:
    name: str = field(default="tiny", metadata={"help": "Preset of `embodied-rl make-model` (tiny | openvla-7b)."})
    image_size: int = field(default=224, metadata={"help": "Input side in pixels of the created model."})


@dataclass
class ModelConfig:
    model_type: str = field(default="openvla_oft", metadata={"help": "Policy architecture, a key of the model registry (openvla_oft)."})
    model_path: str = field(default="models/tiny-openvla-oft", metadata={"help": "Checkpoint directory in the official HF layout (config.json, safetensors, tokenizer, dataset_statistics.json)."})
    create_preset: CreatePresetConfig | None = field(default=None, metadata={"help": "When model_path has no checkpoint yet, create one there from this preset (random init, official layout, with actor.model's action_dim, proprio_dim and num_images_in_input) before the run; a checkpoint already there must have the preset's architecture (name and image_size), else the run is refused. null = use the checkpoint as it is; a missing one is an error."})
    action_dim: int = field(default=7, metadata={"help": "Action dimensions per step (7 for EEF delta pose + gripper)."})
    num_action_chunks: int = field(default=8, metadata={"help": "Actions decoded in parallel per forward pass (the chunk length C)."})
    use_proprio: bool = field(default=False, metadata={"help": "Append a projected proprioception token after the image patches (state normalised with the 'proprio' q01/q99 statistics)."})
    proprio_dim: int = field(default=8, metadata={"help": "Proprioception size D of EnvObservation.states when use_proprio (LIBERO: 8)."})
    unnorm_key: str | None = field(default=None, metadata={"help": "Key of dataset_statistics.json used to un-normalise actions; null = the only key present. '<key>_no_noops' is tried as a fallback."})
    value_type: str = field(default="action_level", metadata={"help": "Value head output: chunk_level (1 value per chunk) | action_level (one per action of the chunk); must match algorithm.reward_type for gae."})
    add_value_head: bool = field(default=False, metadata={"help": "Add the critic MLP (4096-512-128-out) on the hidden state before the first action slot; needed by the critic-based adv_type gae and bi_level_gae (PPO), false for grpo and reinforce_pp."})
    center_crop: bool = field(default=True, metadata={"help": "Apply the OFT evaluation centre crop (90% of the area, resized back) before normalisation."})
    precision: str = field(default="fp32", metadata={"help": "Parameter dtype: fp32 | bf16 | fp16."})
    image_size: int | None = field(default=None, metadata={"help": "Model input side in pixels; null = the checkpoint's image_sizes. A different value is an error (ViT position embeddings are fixed)."})
    num_images_in_input: int = field(default=1, metadata={"help": "Cameras per sample: 1 = third-person, 2 = third-person + wrist."})
    max_prompt_length: int = field(default=64, metadata={"help": "Prompt tokens (BOS..'▁') left-padded to this fixed length so rollout batches stack; longer prompts are an error."})
    append_stop_token: bool = field(default=True, metadata={"help": "End the sequence with '</s>' after the action slots (official OFT training layout); false = RLinf's layout without it."})
    attention_mode: str = field(default="bidirectional", metadata={"help": "bidirectional (OpenVLA-OFT's parallel decoding) | causal (only for checkpoints trained with a causal mask, e.g. by stock-transformers RLinf runs)."})
    attn_implementation: str = field(default="sdpa", metadata={"help": "LLM attention kernel: sdpa | eager | flash_attention_2 (CUDA + flash-attn only); all bidirectional."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute ViT blocks and decoder layers in backward to save activation memory."})
    is_lora: bool = field(default=False, metadata={"help": "Train LoRA adapters (both ViTs, projector, LLM, lm_head) instead of all weights; the value head stays fully trainable."})
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank r."})
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha; null = lora_rank (scale 1)."})
    lora_path: str | None = field(default=None, metadata={"help": "Directory of saved peft adapters (adapter_config.json + adapter_model.safetensors) to load and keep training."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"],
        metadata={"help": "Module-name suffixes wrapped with LoRA (peft matching)."},
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError (one line, naming the key) on an invalid value."""
        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(f"actor.model.{key}: {msg}")

        if self.value_type not in VALUE_TYPES:
            raise bad("value_type", f"got {self.value_type!r}, expected one of {', '.join(VALUE_TYPES)}")
        if self.precision not in PRECISIONS:
            raise bad("precision", f"got {self.precision!r}, expected one of {', '.join(PRECISIONS)}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise bad("attn_implementation", f"got {self.attn_implementation!r}, expected one of {', '.join(ATTN_IMPLEMENTATIONS)}")
        if self.attention_mode not in ATTENTION_MODES:
            raise bad("attention_mode", f"got {self.attention_mode!r}, expected one of {', '.join(ATTENTION_MODES)}")
        for key in ("action_dim", "num_action_chunks", "num_images_in_input", "max_prompt_length", "lora_rank", "proprio_dim"):
            if int(getattr(self, key)) < 1:
                raise bad(key, f"must be >= 1, got {getattr(self, key)}")
        if self.image_size is not None and self.image_size < 14:
            raise bad("image_size", f"must be >= 14 (one ViT patch) or null, got {self.image_size}")
        if self.lora_path is not None and not self.is_lora:
            raise bad("lora_path", "is set but is_lora is false; set actor.model.is_lora=true to load adapters")
        if not self.lora_target_modules:
            raise bad("lora_target_modules", "must name at least one module")

    @property
    def num_action_tokens(self) -> int:
        return self.action_dim * self.num_action_chunks

    @property
    def value_dim(self) -> int:
        return 1 if self.value_type == "chunk_level" else self.num_action_chunks
