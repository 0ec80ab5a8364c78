"""A vLLM-backed OpenVLA-OFT policy for rollouts: the HF policy's predict / prepare_inputs /
load_trainable_state_dict surface, with the LLM pass (vision towers, projector, bidirectional
trunk, action readout) inside a single-process vLLM engine.

Everything around that pass is the HF policy's own code: prompt and image processing, the
proprio projector, the value head, sampling / log-probs / entropy (sampling.py) and action
de-tokenisation. They come from an OpenVLAOFTPolicy built on the meta device (its core
weights never materialise; the small heads load from the checkpoint).

The engine and the heads run in `actor.model.precision`, the dtype the HF rollout policy is
loaded in; the logits are sampled in fp32 as there. `gpu_memory_utilization` is the engine's
share of its GPU (rollout.gpu_memory_utilization, which config/plan.py derives when null).
vLLM's CPU build sizes its cache by VLLM_CPU_KVCACHE_SPACE (engine_env) instead.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from embodied_rl.errors import ConfigError
from embodied_rl.models.base import PolicyOutput
from embodied_rl.models.generators import GeneratorLike
from embodied_rl.models.openvla_oft import checkpoint as ckpt
from embodied_rl.models.openvla_oft import lora
from embodied_rl.models.openvla_oft import sampling as S
from embodied_rl.models.openvla_oft.actions import load_dataset_statistics
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.components import (
    VALUE_HEAD,
    checkpoint_norm_stats,
    load_components,
)
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
from embodied_rl.models.openvla_oft.vllm import layout
from embodied_rl.models.registry import PRECISION_DTYPES

CORE_PREFIX = "vla."
# vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process (its threads
# are bound); close() puts the original back so the process works as before once the engine is gone.
_SET_NUM_THREADS = torch.set_num_threads


def engine_env(num_threads: int) -> dict[str, str]:
    """Environment the in-process CPU engine needs; set before vLLM starts its engine.

    One process (the model object is reachable for in-place weight sync), a small KV-cache
    budget (the encoder-only model allocates none), and an explicit thread count: without
    OMP_NUM_THREADS vLLM drops torch to 1 thread in a way that made latency ~50x worse."""
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
            "OMP_NUM_THREADS": str(num_threads), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}


def _host_policy(path: Path, model_cfg: OpenVLAOFTConfig, init_seed: int) -> OpenVLAOFTPolicy:
    """The HF policy without its core weights: processors, statistics, value head, proprio projector
    (in model_cfg.precision, as the HF policy's); the engine holds the core.

    Under LoRA the core's module tree too, adapters included (they train in the actor and are
    folded into the engine's weights at every sync), with every base weight left on the meta
    device: the fold reads the adapted layers' base weights from the checkpoint files when it
    needs them (VLLMOpenVLAOFT._write_adapted)."""
    dtype = PRECISION_DTYPES[model_cfg.precision]
    if model_cfg.is_lora:
        host = OpenVLAOFTPolicy.skeleton(path, model_cfg, device="cpu", dtype=dtype)
        lora.materialize_adapters(host.vla, host._adapter_dir(path))
    else:
        from transformers import PreTrainedTokenizerFast

        arch = OpenVLAArchConfig.load(path)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
        with torch.device("meta"):
            host = OpenVLAOFTPolicy(model_cfg, arch, tokenizer, load_dataset_statistics(path), checkpoint_norm_stats(path))
    embedded = _embedded_value_head(path)
    load_components(host.components(), path, {VALUE_HEAD: embedded} if embedded else {}, False, init_seed)
    for module in host.components().values():
        if module is not None:
            module.to(dtype)
    return host.eval()


def _embedded_value_head(path: Path) -> dict[str, torch.Tensor]:
    """`value_head.*` tensors saved inside the main weights (RLinf's layout), read without loading the rest."""
    reader = ckpt.TensorReader(path)
    prefix = f"{VALUE_HEAD}."
    return {k.removeprefix(prefix): reader(k) for k in reader if k.startswith(prefix)}


class VLLMOpenVLAOFT:
    """Rollout-side OpenVLA-OFT policy served by vLLM (in-process engine, in model_cfg.precision)."""

    def __init__(self, model_path: str | Path, model_cfg: OpenVLAOFTConfig, *, attention: str = "auto",
                 max_num_seqs: int = 64, num_threads: int | None = None, init_seed: int = 0,
                 work_dir: str | Path | None = None, gpu_memory_utilization: float | None = None) -> None:
        if model_cfg.attention_mode != "bidirectional":
            raise ConfigError("rollout.backend=vllm runs OFT's bidirectional pass only; use attention_mode=bidirectional or the huggingface backend")
        path = Path(model_path)
        self.model_cfg = model_cfg
        self.dtype = PRECISION_DTYPES[model_cfg.precision]
        self.host = _host_policy(path, model_cfg, init_seed)
        self._base_weights = ckpt.TensorReader(path) if model_cfg.is_lora else None
        arch = self.host.arch
        self.image_id, self.action_id = layout.placeholder_ids(arch)
        self.stop_id = self.host.vla.stop_token_id if model_cfg.append_stop_token else None
        hidden = arch.llm_hidden_size
        self.n_bins = arch.n_action_bins
        num_extra = 1 if model_cfg.use_proprio else 0
        config = layout.engine_config(arch, num_images=model_cfg.num_images_in_input, num_extra=num_extra,
                                      num_action_tokens=model_cfg.num_action_tokens,
                                      append_stop_token=model_cfg.append_stop_token, attention=attention)
        self.attention = config["oft_attention"]
        self._tmp = tempfile.TemporaryDirectory(prefix="oft_vllm_") if work_dir is None else None
        engine_dir = layout.write_engine_dir(path, work_dir or self._tmp.name, config)
        seq_len = layout.sequence_length(arch, model_cfg.num_images_in_input, num_extra, model_cfg.max_prompt_length,
                                         model_cfg.num_action_tokens, model_cfg.append_stop_token)
        self.llm = _start_engine(engine_dir, seq_len, max_num_seqs, num_threads, self.dtype, gpu_memory_utilization)
        self.hidden_size = hidden
        self.weight_version = 0
        if model_cfg.is_lora and self.host.loaded_adapters:
            self._write_adapted()  # the engine loaded the base weights only

    # ----------------------------------------------------------------- inputs
    def prepare_inputs(self, obs: Any) -> dict[str, torch.Tensor]:
        return self.host.prepare_inputs(obs)

    def set_dataset_statistics(self, stats: dict[str, Any]) -> None:
        self.host.set_dataset_statistics(stats)

    def _requests(self, inputs: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
        pixels = self.host.image_transform.normalize(inputs["images"].cpu())
        extra = None
        if self.host.proprio_projector is not None:
            with torch.no_grad():
                extra = self.host.proprio_projector(inputs["proprio"].cpu().to(self.dtype)).unsqueeze(1)
        requests = []
        for b in range(pixels.shape[0]):
            ids = inputs["input_ids"][b][inputs["attention_mask"][b].bool()].tolist()
            item: dict[str, torch.Tensor] = {"pixel_values": pixels[b: b + 1]}
            if extra is not None:
                item["extra_tokens"] = extra[b: b + 1]
            prompt = layout.engine_prompt(ids, self.image_id, self.action_id, self.model_cfg.num_action_tokens, self.stop_id)
            requests.append({"prompt_token_ids": prompt, "multi_modal_data": {"image": item}})
        return requests

    def logits_and_hidden(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> bin logits float [B, T, n_bins], readout hidden states [B, T, H] (the HF core's outputs)."""
        outs = self.llm.encode(self._requests(inputs), pooling_task="token_classify", use_tqdm=False)
        data = torch.stack([o.outputs.data for o in outs]).float()
        return data[..., : self.n_bins], data[..., self.n_bins:]

    # ---------------------------------------------------------------- predict
    @torch.no_grad()
    def predict(self, inputs: dict[str, torch.Tensor], *, do_sample: bool = True, temperature: float = 1.0,
                compute_values: bool = True, generator: GeneratorLike = None) -> PolicyOutput:
        logits, hidden = self.logits_and_hidden(inputs)
        values = None
        if compute_values and self.host.value_head is not None:
            values = self.host.critic_values(hidden.to(self.dtype), inputs)
        cfg = self.model_cfg
        tokens, logprobs, entropy, extra = S.sample_and_score_as(cfg, logits, do_sample=do_sample, temperature=temperature,
                                                                generator=generator)
        normed = self.host.action_tokenizer.decode(tokens).view(tokens.shape[0], cfg.num_action_chunks, cfg.action_dim)
        return PolicyOutput(actions=self.host.action_norm.unnormalize(normed), action_record=tokens,
                            logprobs=logprobs, entropy=entropy,
                            values=values, forward_inputs={**inputs, **extra})

    # ---------------------------------------------------------- weight sync
    def trainable_keys(self) -> list[str]:
        return self.host._trainable_keys()

    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """The HF policy's trainable_state_dict -> engine + heads, in place (one bucket)."""
        expected = set(self.trainable_keys())
        if set(sd) != expected:
            missing, extra = sorted(expected - set(sd)), sorted(set(sd) - expected)
            raise ValueError(f"trainable state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]}")
        self.load_trainable_buckets([sd])

    def load_trainable_buckets(self, buckets: Iterable[dict[str, torch.Tensor]]) -> int:
        """Buckets of the HF policy's trainable_state_dict (distributed/weight_sync.py) -> engine +
        heads, in place, one bucket at a time. Full fine-tuning: the core tensors of each bucket go
        straight into the engine (its load_weights copies them), the heads into the host policy.
        LoRA: adapters and heads into the host policy, then, once all arrived, the adapted layers
        with the adapters folded in into the engine (_write_adapted). Returns the number of buckets."""
        from embodied_rl.distributed.weight_sync import load_buckets

        keys = self.trainable_keys()
        if self.model_cfg.is_lora:
            count = load_buckets(lambda part: self.host.load_state_dict(part, strict=False), buckets, keys)
            self._write_adapted()
        else:
            count = load_buckets(self._load_part, buckets, keys)
            self._reset_encoder_cache()
        self.weight_version += 1
        return count

    def _load_part(self, part: dict[str, torch.Tensor]) -> None:
        core = {k.removeprefix(CORE_PREFIX): v for k, v in part.items() if k.startswith(CORE_PREFIX)}
        if core:
            self._write_core(core, reset_cache=False)
        for name, module in self.host.components().items():
            prefix = f"{name}."
            heads = {k.removeprefix(prefix): v for k, v in part.items() if k.startswith(prefix)}
            if module is not None and heads:
                module.load_state_dict(heads, strict=False)

    def _write_adapted(self) -> None:
        """LoRA: the adapted layers' weights with the adapters folded in, merged one layer at a time
        on the host from the checkpoint's base weight (memory-mapped) and written in buckets. The
        other core weights stay as the engine loaded them (frozen under LoRA); the host holds at
        most one bucket of merged weights."""
        from embodied_rl.distributed.weight_sync import make_buckets

        for bucket in make_buckets(lora.merged_adapted_weights(self.host.vla, self._base_weights)):
            self._write_core(bucket, reset_cache=False)
        self._reset_encoder_cache()

    def _write_core(self, weights: dict[str, torch.Tensor], reset_cache: bool = True) -> None:
        """Core tensors under the checkpoint's names into the running engine, in place (the
        engine's load_weights copies each into its parameter, in its dtype, on its device)."""
        core = [(k, v.detach()) for k, v in weights.items()]
        n_loaded = self.llm.apply_model(lambda model: len(model.load_weights(core)))
        if n_loaded != [len(core)]:
            raise RuntimeError(f"weight sync loaded {n_loaded} of {len(core)} core tensors into the vLLM engine")
        if reset_cache:
            self._reset_encoder_cache()

    def _reset_encoder_cache(self) -> None:
        # vLLM keeps vision embeddings by image hash across requests: an image seen before the sync
        # would otherwise reuse features of the old weights (the e2e test caught exactly that).
        self.llm.llm_engine.reset_encoder_cache()

    def reference_view(self) -> None:
        """None: the engine cannot score with other weights than its own, so the KL reference
        (models/reference.py) loads a frozen HF copy."""

    def to(self, device: torch.device | str) -> VLLMOpenVLAOFT:
        # Offload would be vLLM's sleep mode, which exists on GPUs only; the config checks refuse
        # rollout.enable_offload with this backend, so reaching this is a bug.
        raise NotImplementedError("the vLLM engine does not move between devices (rollout.enable_offload is refused at config load)")

    def close(self) -> None:
        """Shut the engine down and remove its directory (idempotent)."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()  # in-process core: frees the model now, not at GC
            self.llm = None
            torch.set_num_threads = _SET_NUM_THREADS
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _start_engine(engine_dir: Path, seq_len: int, max_num_seqs: int, num_threads: int | None, dtype: torch.dtype,
                  gpu_memory_utilization: float | None) -> Any:
    # An OMP_NUM_THREADS already in the environment wins over the default (all cores).
    threads = num_threads or int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    os.environ.update(engine_env(threads))
    from vllm import LLM

    from embodied_rl.models.openvla_oft.vllm import register

    register()
    # Without a share, vLLM's own default (0.92 of the device) applies.
    share = {} if gpu_memory_utilization is None else {"gpu_memory_utilization": gpu_memory_utilization}
    return LLM(model=str(engine_dir), runner="pooling", skip_tokenizer_init=True, dtype=dtype, seed=0,
               max_model_len=seq_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=seq_len * max_num_seqs,
               enable_mm_embeds=True, limit_mm_per_prompt={"image": 1}, enforce_eager=True, **share)
