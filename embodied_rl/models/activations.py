"""Activation memory of one training micro-batch, counted by running the policy on fake tensors.

The policy's own training forward (a greedy `predict` for the action record, then
`evaluate_actions` on it, as the actor's loss does) runs under torch's FakeTensorMode on the
module tree `skeleton` builds: every tensor has its real shape, dtype and device and no storage,
so a 7.5B policy runs in seconds and allocates nothing. What autograd saves for backward is
counted through saved-tensor hooks, once per storage (views and tensors saved by several ops
share one), which is what the real forward keeps alive until backward. The fake tensors are on
the CPU, so the CPU's kernels are chosen: its fused attention saves the log-sum-exp, not the
L x L weights, as flash-attn and the GPU's fused kernels do (a meta-device run would pick the
math kernel and count the weights).
Parameters and buffers that ops save (a matmul keeps its weight) are left out: the model states
hold them already.

With gradient checkpointing the FSDP units (ViT blocks, decoder layers) keep only their inputs
across the forward and recompute their activations in backward, one unit at a time: the count
is what the forward saves outside the units, plus the units' inputs, plus the largest unit's
own activations (the recompute working set).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from embodied_rl.fact_cache import FactCache
from embodied_rl.process_env import embodied_rl_home
from embodied_rl.types import EnvObservation

if TYPE_CHECKING:
    from embodied_rl.config.schema.env import EnvConfig
    from embodied_rl.config.schema.model import ModelConfig
    from embodied_rl.models.base import BasePolicy


@dataclass(frozen=True)
class ActivationCount:
    """Bytes autograd keeps for backward in one micro-batch's forward."""
    saved: int                 # everything, without checkpointing
    in_units: tuple[int, ...]  # of which saved inside each FSDP unit
    unit_inputs: int           # the units' input activations (what checkpointing keeps of them)

    def peak(self, checkpointing: bool) -> int:
        if not checkpointing or not self.in_units:
            return self.saved
        return self.saved - sum(self.in_units) + self.unit_inputs + max(self.in_units)


def _fake_module(policy: nn.Module, mode: Any, device: torch.device) -> None:
    """Swap every parameter and buffer of `policy` (meta or real) for a fake tensor on `device`."""
    convert = mode.fake_tensor_converter

    def fake(t: torch.Tensor) -> torch.Tensor:
        return convert.from_meta_and_device(mode, t, device) if t.is_meta else mode.from_tensor(t.to(device) if t.device != device else t)

    for module in policy.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = nn.Parameter(fake(p.data), requires_grad=p.requires_grad)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake(b)


def count_activations(policy: BasePolicy, obs: EnvObservation, device: torch.device | str = "cpu") -> ActivationCount:
    """Count the activations of `policy`'s training forward on `obs` (one micro-batch). `policy`
    is a skeleton (meta parameters) or a real policy; its parameters are replaced by fake ones,
    so use it for nothing else afterwards."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    device = torch.device(device)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _fake_module(policy, mode, device)
    policy.train()
    inputs = policy.prepare_inputs(obs)
    units = policy.fsdp_units()
    sizes: dict[int, int] = {}
    owner: dict[int, int] = {}
    current: list[int] = []  # index of the unit whose forward is running (innermost last)
    unit_inputs = [0]

    # Weights saved for backward (a matmul keeps its weight) are memory the model states count.
    weights = {t.untyped_storage()._cdata for t in (*policy.parameters(), *policy.buffers())}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in weights:
            return t
        sizes[key] = storage.nbytes()
        owner.setdefault(key, current[-1] if current else -1)
        return t

    def enter(index: int):
        def hook(module: nn.Module, args: tuple) -> None:
            current.append(index)
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is not None and torch.is_grad_enabled():
                unit_inputs[0] += first.untyped_storage().nbytes()
        return hook

    def leave(module: nn.Module, args: tuple, output: Any) -> None:
        current.pop()

    handles = [h for i, u in enumerate(units) for h in (u.register_forward_pre_hook(enter(i)), u.register_forward_hook(leave))]
    try:
        with mode:
            fake_inputs = {k: mode.from_tensor(v.to(device)) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
            with torch.no_grad():
                record = policy.predict(fake_inputs, do_sample=False)
            unit_inputs[0] = 0
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                policy.evaluate_actions(fake_inputs, record.action_record)
    finally:
        for h in handles:
            h.remove()
    in_units = [0] * len(units)
    for key, nbytes in sizes.items():
        if owner[key] >= 0:
            in_units[owner[key]] += nbytes
    return ActivationCount(sum(sizes.values()), tuple(in_units), unit_inputs[0])


def example_observation(model_cfg: ModelConfig, env_cfg: EnvConfig, batch: int) -> EnvObservation | str:
    """A batch of `batch` blank observations of the shapes `env_cfg` gives (its EnvSpec), or why
    the spec does not tell them."""
    from embodied_rl.envs.backend import spec_of

    spec = spec_of(env_cfg, "env")
    if spec.image_size is None or spec.cameras is None:
        return f"{env_cfg.env_type}'s image size is known only once it runs"
    image = np.zeros((batch, *spec.image_size, 3), dtype=np.uint8)
    state_dim = spec.state_dim or model_cfg.proprio_dim or 1
    privileged = (np.zeros((batch, model_cfg.privileged_state_dim), dtype=np.float32)
                  if model_cfg.value_input == "privileged_state" else None)
    return EnvObservation(main_images=image, states=np.zeros((batch, state_dim), dtype=np.float32),
                          task_descriptions=[env_cfg.task_description or INSTRUCTION] * batch,
                          wrist_images=image.copy() if model_cfg.num_images_in_input > 1 else None, privileged_states=privileged)


#: The instruction counted where the env config has none (LIBERO's come with each task): about
#: the longest of LIBERO's.
INSTRUCTION = "pick up the black bowl between the plate and the ramekin and place it on the plate"


@cache
def _fingerprint() -> str:
    """What a count depends on beyond its inputs: the policy code and the kernels' libraries."""
    root = Path(__file__).parent
    stats = [(str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(root.rglob("*.py"))]
    libs = [version(name) for name in ("torch", "transformers", "timm", "peft")]
    return hashlib.sha256(repr((stats, libs)).encode()).hexdigest()[:32]


def activation_bytes(model_cfg: ModelConfig, env_cfg: EnvConfig, micro_batch: int, param_dtype: str) -> int | str:
    """Peak activation bytes of one actor micro-batch of `model_cfg`'s checkpoint on `env_cfg`'s
    observations in the compute dtype, with the configured gradient checkpointing; or why it is
    not counted. Cached per user by the checkpoint's config and the shapes (a 7.5B count takes
    seconds, the tiny one about one)."""
    from embodied_rl.models.registry import (
        PRECISION_DTYPES,
        policy_class,
    )

    path = Path(model_cfg.model_path)
    if not (path / "config.json").is_file():
        return f"{path} holds no checkpoint yet"
    obs = example_observation(model_cfg, env_cfg, micro_batch)
    if isinstance(obs, str):
        return obs
    settings = {k: v for k, v in asdict(model_cfg).items() if k not in ("model_path", "create_preset")}
    key = hashlib.sha256(json.dumps([(path / "config.json").read_text(), settings, obs.main_images.shape, obs.states.shape,
                                     obs.wrist_images is not None, obs.task_descriptions[0], param_dtype],
                                    sort_keys=True, default=str).encode()).hexdigest()[:32]

    def count() -> list:
        cls = policy_class(model_cfg.model_type)
        # Counted with the CPU's kernels: flash-attn's saves what the fused sdpa kernel saves.
        runnable = model_cfg.runnable_on(torch.device("cpu"))
        try:
            skeleton = cls.skeleton(path, runnable, device="cpu", dtype=PRECISION_DTYPES[param_dtype])
        except NotImplementedError:
            return [None, f"{model_cfg.model_type} cannot be built on the meta device"]
        counted = count_activations(skeleton, obs)
        return [counted.peak(model_cfg.gradient_checkpointing), ""]

    found, why = FactCache(embodied_rl_home() / "activations.json", _fingerprint()).get(key, count)
    return found if found is not None else why
