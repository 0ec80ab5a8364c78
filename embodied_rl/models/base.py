"""The policy interface the rollout and actor workers use, independent of the architecture.

FSDP2 note: `fully_shard` hooks run on `forward` only, so `predict` and `evaluate_actions`
are thin wrappers that go through `self(...)` (i.e. `forward(inputs, mode=...)`). Calling
them on an FSDP-wrapped policy therefore gathers parameters correctly.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from embodied_rl.errors import ConfigError
from embodied_rl.types import EnvObservation

if TYPE_CHECKING:
    from embodied_rl.config.schema.model import ModelConfig
    from embodied_rl.models.generators import GeneratorLike

#: What evaluate_actions scores a record under (see there).
Scoring = Literal["rollout", "likelihood"]


@dataclass
class PolicyOutput:
    """One rollout forward pass for B observations (C = num_action_chunks, A = action_dim,
    L = the policy's number of log-prob entries per sample).

    actions:        float32 [B, C, A] what the env executes, un-normalised with the checkpoint's
                    dataset statistics.
    action_record:  Tensor [B, ...], whatever this policy needs to score the sampled action again
                    (e.g. the sampled category indices of a discretising policy, or the pre-squash sample
                    of a Gaussian one). Opaque to the runtime: it stores the record per sample,
                    slices it along B and hands it back to `evaluate_actions`; only the policy
                    reads it.
    logprobs:       float32 [B, L] log-probs of the record's entries under the distribution it was
                    sampled from (after the sampling settings, e.g. temperature).
    entropy:        float32 [B, L] entropy of each entry's distribution.
    values:         float32 [B, 1] (chunk_level) or [B, C] (action_level); None without a value head.
    forward_inputs: batch-first tensors that re-score the record with evaluate_actions
                    (OpenVLA-OFT: input_ids, attention_mask, images uint8, [proprio]).
    """

    actions: torch.Tensor
    action_record: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None
    forward_inputs: dict[str, torch.Tensor]


class BasePolicy(nn.Module):
    """A stochastic VLA policy with an optional value head."""

    model_cfg: ModelConfig

    @abstractmethod
    def prepare_inputs(self, obs: EnvObservation) -> dict[str, torch.Tensor]:
        """Processor: images (+wrist), instructions (+states) -> batch-first model inputs (on CPU)."""

    def predict(self, inputs: dict[str, torch.Tensor], *, do_sample: bool, temperature: float = 1.0,
                compute_values: bool = True, generator: GeneratorLike = None) -> PolicyOutput:
        """One forward pass producing a chunk of actions (call under torch.no_grad for rollouts):
        drawn at `temperature` with the policy's own sampling settings from its model config
        (e.g. a discretising policy's truncation), or the most likely action when not
        `do_sample`; their log-probs are those evaluate_actions(scoring="rollout") gives."""
        return self(inputs, mode="predict", do_sample=do_sample, temperature=temperature,
                    compute_values=compute_values, generator=generator)

    def evaluate_actions(self, inputs: dict[str, torch.Tensor], action_record: torch.Tensor, *, temperature: float = 1.0,
                         compute_values: bool = True, scoring: Scoring = "rollout") -> dict[str, torch.Tensor]:
        """Re-score stored action records [B, ...] (PolicyOutput.action_record) with gradients:
        {"logprobs", "entropy" float [B, L], "values" [B, 1|C] or None}.

        scoring "rollout": under the distribution rollouts record log-probs of at `temperature`
        (the policy's own sampling settings applied), what PPO/GRPO ratios and a KL reference
        need; "likelihood": under the model's plain distribution (none of those settings, pass
        temperature 1), what a demonstration's negative log-likelihood needs (SFT, the BC term)."""
        return self(inputs, mode="evaluate", action_record=action_record, temperature=temperature,
                    compute_values=compute_values, scoring=scoring)

    def state_values(self, privileged: torch.Tensor) -> torch.Tensor:
        """An asymmetric critic's values float [B, 1|C] from privileged states [B, P] alone, with
        gradients; through forward() so a sharded (FSDP) policy gathers the value head's weights."""
        return self({"privileged": privileged}, mode="state_values")

    def forward(self, inputs: dict[str, torch.Tensor], mode: str = "evaluate", **kwargs: Any) -> Any:
        if mode == "predict":
            return self._predict(inputs, **kwargs)
        if mode == "evaluate":
            return self._evaluate(inputs, **kwargs)
        if mode == "state_values":
            return self._state_values(inputs)
        raise ValueError(f"unknown policy forward mode {mode!r}: expected 'predict', 'evaluate' or 'state_values'")

    def _state_values(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no critic on the privileged state")

    @abstractmethod
    def _predict(self, inputs: dict[str, torch.Tensor], **kwargs: Any) -> PolicyOutput: ...

    @abstractmethod
    def _evaluate(self, inputs: dict[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]: ...

    @abstractmethod
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """What weight sync sends: LoRA + value head (+ proprio projector) when is_lora, else everything."""

    @abstractmethod
    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Inverse of trainable_state_dict (exact key set; a mismatch is an error)."""

    def load_trainable_buckets(self, buckets: Iterable[dict[str, torch.Tensor]]) -> int:
        """Load the trainable tensors from a sequence of buckets (parts of trainable_state_dict's
        keys, each key once; distributed/weight_sync.py), copying each bucket into the weights in
        place and dropping it before the next is taken. Returns the number of buckets."""
        from embodied_rl.distributed.weight_sync import load_buckets

        return load_buckets(lambda part: self.load_state_dict(part, strict=False), buckets, self.trainable_state_dict())

    def set_dataset_statistics(self, stats: dict[str, Any]) -> None:
        """Use these action/proprio normalisation statistics (one `dataset_statistics` entry)
        from now on, in predictions, training targets and saved checkpoints."""
        raise NotImplementedError(f"{type(self).__name__} has no dataset statistics to replace")

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env-space action chunks float [N, C, A] -> the policy's normalised actions float
        [N, C*A] in [-1, 1], with the statistics it acts with (demos become training targets)."""
        raise NotImplementedError(f"{type(self).__name__} cannot learn from demonstrations")

    def record_actions(self, normalized: torch.Tensor) -> torch.Tensor:
        """Normalised actions float [N, C*A] -> the action record [N, ...] that evaluate_actions
        scores, as if the policy had sampled them."""
        raise NotImplementedError(f"{type(self).__name__} cannot learn from demonstrations")

    def observe_training_batch(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """See the inputs [N, ...] of a whole training batch before the update trains on it
        (e.g. to update running input statistics); the same batch on every actor rank."""

    def reference_view(self) -> Callable[[], AbstractContextManager[None]] | None:
        """The KL reference without a second model: a factory of contexts inside which forward
        passes score as the policy does now (call it before any weight update), or None when
        this policy cannot share its weights that way (the reference then loads a second copy)."""
        return None

    def close(self) -> None:
        """Release what the policy holds outside this module (an engine); a torch module holds nothing."""

    @abstractmethod
    def fsdp_units(self) -> list[nn.Module]:
        """Submodules to wrap with fully_shard individually (then wrap the policy itself as root)."""

    @abstractmethod
    def save_checkpoint(self, out_dir: str | Path) -> None:
        """Write a checkpoint that `from_checkpoint(out_dir, model_cfg)` restores exactly."""

    def export_merged(self, out_dir: str | Path) -> None:
        """A checkpoint that loads without any adapter (`embodied-rl export`); a policy whose
        trained weights are all in its own modules writes what save_checkpoint writes."""
        self.save_checkpoint(out_dir)

    @classmethod
    def skeleton(cls, path: str | Path, model_cfg: ModelConfig, *, device: torch.device | str,
                 dtype: torch.dtype = torch.float32) -> BasePolicy:
        """from_checkpoint's module tree with parameters and persistent buffers on the meta
        device (non-persistent buffers real), for loading shard by shard; see the OFT policy."""
        raise NotImplementedError(f"{cls.__name__} cannot be built on the meta device")

    @classmethod
    def from_preset(cls, preset: str, model_cfg: ModelConfig, *, device: torch.device | str = "cpu",
                    dtype: torch.dtype | None = None, **preset_kwargs: Any) -> BasePolicy:
        """Random-init policy of a named architecture preset; policies without presets refuse."""
        raise ConfigError(f"actor.model.model_type={model_cfg.model_type!r} has no architecture presets")

    @classmethod
    @abstractmethod
    def from_checkpoint(cls, path: str | Path, model_cfg: ModelConfig, *, device: torch.device | str = "cpu",
                        dtype: torch.dtype | None = None, warn_untrained_value_head: bool = True,
                        init_seed: int = 0) -> BasePolicy:
        """Build the policy from a checkpoint directory (model_cfg.model_path is ignored in favour of `path`).

        warn_untrained_value_head: warn when the checkpoint has no value-head weights (the critic
        starts untrained); False where the loaded value head is never used as is, or where
        another process already said it (all actor ranks but rank 0).
        init_seed: seed of the weights the checkpoint lacks (the same in every process)."""
