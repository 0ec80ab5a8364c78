"""Schema of `actor.model` (owned by embodied_rl/models): the keys every policy has.

Key names follow RLinf's embodied `actor.model` section where the concept exists. The
architecture's dimensions (vision towers, LLM, vocabulary) are never configured here: they
come from the checkpoint's config.json. Keys that describe the checkpoint (image_size,
num_images_in_input, action_dim x num_action_chunks) are checked against it.

A policy's own keys live beside its model (`models/<type>/configuration.py`, a subclass of
ModelConfig registered under its `model_type`), yet stay flat in `actor.model` as in RLinf.
The loader builds the subclass that `model_type` names. This layer never imports a model
package: built-in model types are found through `BUILTIN_MODEL_CONFIGS`, a table of module
paths imported on first use (the lazy registration vLLM's model registry uses), and other
packages call `register_model_config`.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from embodied_rl.errors import ConfigError, DuplicateRegistration
from embodied_rl.registry import shadows_builtin

VALUE_TYPES = ("chunk_level", "action_level")
VALUE_INPUTS = ("hidden", "privileged_state")
PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT_MODEL_TYPE = "openvla_oft"

#: model_type -> module whose import registers that type's config class.
BUILTIN_MODEL_CONFIGS = {"openvla_oft": "embodied_rl.models.openvla_oft.configuration",
                         "cnn_gaussian": "embodied_rl.models.cnn_gaussian.configuration"}
_MODEL_CONFIGS: dict[str, type[ModelConfig]] = {}


@dataclass
class CreatePresetConfig:
    name: str = field(default="tiny", metadata={"help": "Preset of `embodied-rl make-model` for actor.model.model_type (openvla_oft: tiny | small | openvla-7b; cnn_gaussian: tiny | nature_cnn)."})
    image_size: int = field(default=224, metadata={"help": "Input side in pixels of the created model."})


@dataclass
class ModelConfig:
    """Keys of every policy; `model_type` picks the registered subclass that adds the policy's own."""

    model_type: str = field(default="openvla_oft", metadata={"help": "Policy architecture, a key of the model registry (openvla_oft | cnn_gaussian)."})
    model_path: str = field(default="models/tiny-openvla-oft", metadata={"help": "Checkpoint directory in the policy's own on-disk layout (openvla_oft: the official HF layout with config.json, safetensors, tokenizer and dataset_statistics.json; cnn_gaussian: config.json and safetensors)."})
    create_preset: CreatePresetConfig | None = field(default=None, metadata={"help": "When model_path has no checkpoint yet, create one there from this preset (random init, official layout, with actor.model's action_dim, proprio_dim and num_images_in_input) before the run; a checkpoint already there must have the preset's architecture (name and image_size), else the run is refused. null = use the checkpoint as it is; a missing one is an error."})
    action_dim: int = field(default=7, metadata={"help": "Action dimensions per step (7 for EEF delta pose + gripper)."})
    num_action_chunks: int = field(default=8, metadata={"help": "Actions decoded in parallel per forward pass (the chunk length C)."})
    unnorm_key: str | None = field(default=None, metadata={"help": "Key of dataset_statistics.json used to un-normalise actions; null = the only key present. '<key>_no_noops' is tried as a fallback."})
    use_proprio: bool = field(default=False, metadata={"help": "Give the policy the proprioceptive state EnvObservation.states (normalised with the 'proprio' q01/q99 statistics)."})
    proprio_dim: int = field(default=8, metadata={"help": "Proprioception size D of EnvObservation.states when use_proprio (LIBERO: 8)."})
    value_type: str = field(default="action_level", metadata={"help": "Value head output: chunk_level (1 value per chunk) | action_level (one per action of the chunk); must match algorithm.reward_type for gae."})
    add_value_head: bool = field(default=False, metadata={"help": "Add the policy's critic (value head; value_input says what it reads); needed by the critic-based adv_type gae and bi_level_gae (PPO), false for grpo and reinforce_pp."})
    value_input: str = field(default="hidden", metadata={"help": "What the critic reads: hidden (the LLM's hidden state before the first action slot, RLinf's critic) | privileged_state (an asymmetric critic on the simulator's privileged state and the episode clock, EnvObservation.privileged_states, standardised by running statistics of the training batches: needs env.train.init_params.privileged_state; the critic then shares no weights with the policy, and its gradient norm is clipped apart from the policy's)."})
    privileged_state_dim: int | None = field(default=None, metadata={"help": "Size P of EnvObservation.privileged_states (the task's state plus 1 for the clock; ManiSkill PushCube-v1: 36, PickCube-v1: 43) when value_input is privileged_state; null otherwise."})
    precision: str = field(default="fp32", metadata={"help": "Parameter dtype of the rollout policy (either rollout.backend: the HF policy or the vLLM engine and its heads) and of the KL reference: fp32 | bf16 | fp16. The actor keeps fp32 master weights and computes in actor.fsdp_config.mixed_precision.param_dtype, which defaults to this."})
    image_size: int | None = field(default=None, metadata={"help": "Model input side in pixels; null = the checkpoint's. A different value is an error (the image encoder's input size is fixed by its weights)."})
    num_images_in_input: int = field(default=1, metadata={"help": "Cameras per sample: 1 = third-person, 2 = third-person + wrist."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute blocks in backward to save activation memory (openvla_oft: its ViT blocks and decoder layers; a policy without it, cnn_gaussian, refuses true)."})
    is_lora: bool = field(default=False, metadata={"help": "Train LoRA adapters on the modules the policy names (OpenVLA-OFT: lora_target_modules, both ViTs, projector, LLM, lm_head) instead of all weights; the value head stays fully trainable."})
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank r."})
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha; null = lora_rank (scale 1)."})
    lora_path: str | None = field(default=None, metadata={"help": "Directory of saved peft adapters (adapter_config.json + adapter_model.safetensors) to load and keep training."})

    def __post_init__(self) -> None:
        if type(self) is ModelConfig:  # the policy would miss its own keys
            raise TypeError("ModelConfig holds the keys shared by all policies; build a policy's config with model_config(model_type, ...)")
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError (one line, naming the key) on an invalid value."""
        if self.value_type not in VALUE_TYPES:
            raise model_key_error("value_type", f"got {self.value_type!r}, expected one of {', '.join(VALUE_TYPES)}")
        if self.value_input not in VALUE_INPUTS:
            raise model_key_error("value_input", f"got {self.value_input!r}, expected one of {', '.join(VALUE_INPUTS)}")
        if self.value_input == "privileged_state" and (self.privileged_state_dim is None or self.privileged_state_dim < 2):
            raise model_key_error("privileged_state_dim", f"value_input=privileged_state needs the size of the env's privileged state (>= 2: state and clock), got {self.privileged_state_dim}")
        if self.value_input != "privileged_state" and self.privileged_state_dim is not None:
            raise model_key_error("privileged_state_dim", f"is set but value_input={self.value_input}; remove it or set value_input=privileged_state")
        if self.precision not in PRECISIONS:
            raise model_key_error("precision", f"got {self.precision!r}, expected one of {', '.join(PRECISIONS)}")
        for key in ("action_dim", "num_action_chunks", "num_images_in_input", "lora_rank", "proprio_dim"):
            if int(getattr(self, key)) < 1:
                raise model_key_error(key, f"must be >= 1, got {getattr(self, key)}")
        if self.image_size is not None and self.image_size < 14:
            raise model_key_error("image_size", f"must be >= 14 (one ViT patch) or null, got {self.image_size}")
        if self.lora_path is not None and not self.is_lora:
            raise model_key_error("lora_path", "is set but is_lora is false; set actor.model.is_lora=true to load adapters")

    @property
    def value_dim(self) -> int:
        return 1 if self.value_type == "chunk_level" else self.num_action_chunks

    def parameter_counts(self) -> Any:
        """The policy's parameter counts as configured (an embodied_rl.memory.params.ParamCounts:
        total, trainable, the largest FSDP block), read without building it; None = not countable
        (yet): the memory plan then forecasts nothing. A model type overrides it."""
        return None

    def cuda_half_precision_only(self) -> tuple[str, str] | None:
        """A setting of this config that runs only on CUDA GPUs in fp16/bf16, as (`key=value` of
        actor.model, the `key=value` that computes the same anywhere), or None; a model type
        with such a setting (an attention kernel) overrides it."""
        return None

    def runnable_on(self, device: Any) -> ModelConfig:
        """This config for a build outside a run (export, replay, an activation count) on `device`
        (a torch.device): a setting the device cannot run replaced by one computing the same from
        the same weights. A run never swaps: the config checks refuse what it cannot run."""
        return self

    def activation_bytes(self, env_cfg: Any, micro_batch: int, param_dtype: str) -> int | str:
        """Peak activation bytes of one actor micro-batch of `micro_batch` observations of `env_cfg`
        (an EnvConfig) in the compute dtype `param_dtype`, or why they are not counted. A model
        type overrides it (embodied_rl.models.activations counts any policy with a skeleton)."""
        return f"model_type {self.model_type} does not count its activations"

    def checkpoint_spec(self) -> Any:
        """What the checkpoint at model_path fixes about observations and actions (an
        embodied_rl.models.checkpoint_spec.CheckpointSpec read from its JSON files, without
        building the policy), or None where this model type does not say: the config checks then
        compare nothing against it. A model type overrides it."""
        return None

    def preset_names(self) -> tuple[str, ...]:
        """The presets `create_preset.name` (and `embodied-rl make-model`) accept for this model type."""
        return ()

    def preset_mismatch(self, name: str, image_size: int, path: str) -> str | None:
        """How the checkpoint at `path` differs from preset `name` at `image_size`; None if it has
        that architecture (weights and statistics are not compared)."""
        return None

    def preset_keys(self) -> dict[str, Any]:
        """The keys of this model type, beyond the shared ones create_model takes, that a model
        created from a preset follows (e.g. a chunk length that sizes an output layer)."""
        return {}

    def check_with(self, cfg: Any) -> None:
        """Raise ConfigError (one line) for a setting outside actor.model that this policy cannot
        honour; `cfg` is the whole RootConfig. A model type overrides it."""

    @classmethod
    def variant(cls, data: Mapping[str, Any]) -> type[ModelConfig]:
        """The config class of the model type named in `data` (the loader builds this one)."""
        return model_config_class(str(data.get("model_type", DEFAULT_MODEL_TYPE)))


def model_key_error(key: str, msg: str) -> ConfigError:
    return ConfigError(f"actor.model.{key}: {msg}")


def register_model_config(model_type: str) -> Callable[[type[ModelConfig]], type[ModelConfig]]:
    def wrap(cls: type[ModelConfig]) -> type[ModelConfig]:
        if not issubclass(cls, ModelConfig):
            raise TypeError(f"{cls.__name__} must subclass ModelConfig")
        if _MODEL_CONFIGS.get(model_type, cls) is not cls or shadows_builtin(model_type, cls, BUILTIN_MODEL_CONFIGS):
            raise DuplicateRegistration(f"model config {model_type!r} registered twice")
        _MODEL_CONFIGS[model_type] = cls
        return cls

    return wrap


def model_config_class(model_type: str) -> type[ModelConfig]:
    if model_type not in _MODEL_CONFIGS and model_type in BUILTIN_MODEL_CONFIGS:
        importlib.import_module(BUILTIN_MODEL_CONFIGS[model_type])
    if model_type not in _MODEL_CONFIGS:
        known = sorted(set(_MODEL_CONFIGS) | set(BUILTIN_MODEL_CONFIGS))
        raise ConfigError(f"actor.model.model_type={model_type!r} is unknown; available: {', '.join(known)}")
    return _MODEL_CONFIGS[model_type]


def model_config_classes() -> dict[str, type[ModelConfig]]:
    """Every model type's config class, built-in ones imported."""
    for model_type in BUILTIN_MODEL_CONFIGS:
        model_config_class(model_type)
    return dict(sorted(_MODEL_CONFIGS.items()))


def model_config(model_type: str = DEFAULT_MODEL_TYPE, **values: Any) -> ModelConfig:
    """`actor.model` of `model_type` with `values` set, the rest at their defaults."""
    return model_config_class(model_type)(model_type=model_type, **values)
