"""Sampling generators whose device follows the tensor they sample from.

`torch.multinomial(probs, generator=g)` needs `g` on the device of `probs`, and which device
that is depends on the rollout backend, not on the worker: the HF policy returns logits on the
worker's device, a vLLM engine returns pooled logits on the CPU. So a rollout worker holds a
`DeviceGenerators`: one generator per device, made the first time a tensor on that device is
sampled from, every one seeded with the worker's seed. Its state is a {device: state} dict, so
a checkpoint restores each stream on the device it came from and never hands one device's
generator state to another device's generator (a CPU state is 5056 bytes of Mersenne Twister,
a CUDA one 16 bytes of Philox seed and offset; the two are not interchangeable).
"""
from __future__ import annotations

from typing import TypeAlias

import torch

_CPU_STATE_BYTES = torch.Generator().get_state().numel()
_CUDA_STATE_BYTES = 16  # Philox: seed and offset, 8 bytes each


def device_key(device: torch.device | str) -> str:
    """'cpu', 'cuda:0', ...: an accelerator without an index means its current device."""
    device = torch.device(device)
    accelerator = torch.accelerator.current_accelerator()
    if device.index is None and accelerator is not None and device.type == accelerator.type:
        device = torch.device(device.type, torch.accelerator.current_device_index())
    return str(device)


class DeviceGenerators:
    """One torch.Generator per device, each made on first use and seeded with `seed`."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._made: dict[str, torch.Generator] = {}
        self._pending: dict[str, torch.Tensor] = {}  # restored states of devices not sampled on yet

    def on(self, device: torch.device | str) -> torch.Generator:
        """The generator of `device`: a restored state if one is pending, else freshly seeded."""
        key = device_key(device)
        if key not in self._made:
            try:
                gen = torch.Generator(device=key)
            except RuntimeError as err:
                raise ValueError(f"no random generator exists on device {key} ({err}); sample from tensors on cpu or an accelerator") from None
            state = self._pending.pop(key, None)
            if state is None:
                gen.manual_seed(self.seed)
            else:
                gen.set_state(state)
            self._made[key] = gen
        return self._made[key]

    def get_state(self) -> dict[str, torch.Tensor]:
        """{device: state} of every stream, pending ones included (weights_only-loadable)."""
        return {**self._pending, **{k: g.get_state() for k, g in self._made.items()}}

    def set_state(self, state: dict[str, torch.Tensor] | torch.Tensor) -> None:
        """Restore `get_state()`'s dict; devices it lacks start afresh from the seed. A bare
        tensor is one generator's state (the format before per-device states), placed by size."""
        if isinstance(state, torch.Tensor):
            state = {_legacy_device(state): state}
        for key, value in state.items():
            _check_state(key, value)
        self._made.clear()
        self._pending = {device_key(k): v.clone() for k, v in state.items()}


def _check_state(key: str, value: torch.Tensor) -> None:
    on_cpu = torch.device(key).type == "cpu"
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8:
        raise ValueError(f"sampling RNG state for {key}: expected a uint8 tensor from get_state(), got {type(value).__name__}")
    if on_cpu != (value.numel() == _CPU_STATE_BYTES):
        held = "a CPU" if value.numel() == _CPU_STATE_BYTES else f"a {value.numel()}-byte accelerator"
        raise ValueError(f"sampling RNG state for {key} holds {held} generator state; it restores only the device it was saved from")


def _legacy_device(state: torch.Tensor) -> str:
    if state.numel() == _CPU_STATE_BYTES:
        return "cpu"
    if state.numel() == _CUDA_STATE_BYTES:
        return "cuda:0"  # a Ray worker sees its one GPU as device 0
    raise ValueError(f"sampling RNG state of {state.numel()} bytes is neither a CPU nor a CUDA generator state")


#: What a policy's `predict` takes as `generator`.
GeneratorLike: TypeAlias = torch.Generator | DeviceGenerators | None


def generator_for(source: GeneratorLike, device: torch.device) -> torch.Generator | None:
    """The generator to sample a tensor on `device` with: DeviceGenerators pick theirs; a plain
    generator must already be on that device (torch would fail later with a less clear error)."""
    if source is None:
        return None
    if isinstance(source, DeviceGenerators):
        return source.on(device)
    if device_key(source.device) != device_key(device):
        raise ValueError(f"sampling generator is on {source.device} but the probabilities are on {device}; "
                         "pass a DeviceGenerators (models/generators.py), whose device follows the tensor")
    return source
