"""Capture and restore every process-global random number generator.

Exact resume needs the RNG streams of each process exactly where the interrupted run left
them: Python's `random`, NumPy's legacy global generator, torch's CPU generator and, when
CUDA is initialised, every CUDA device generator. Seeding alone is not enough, since a
resumed run would replay the first step's random numbers instead of the next ones.
RLinf saves none of these (its issue #271); we save one state per process.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

RNG_FORMAT = 2  # 2: numpy state stored as a tensor (weights_only loads)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and all CUDA devices) of this process."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device lazily


def capture_rng_state() -> dict[str, Any]:
    """Snapshot of this process's global RNGs; picklable and `torch.save`-able."""
    state: dict[str, Any] = {
        "format": RNG_FORMAT,
        "python": random.getstate(),
        # As a tensor so checkpoints load with torch.load(weights_only=True).
        "numpy": _numpy_state_to_tensors(np.random.get_state()),
        "torch_cpu": torch.get_rng_state(),
    }
    # Only touch CUDA when this process already uses it: querying would initialise a context.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put this process's global RNGs back to a `capture_rng_state()` snapshot."""
    if state.get("format") != RNG_FORMAT:
        raise ValueError(f"RNG state has format {state.get('format')!r}, expected {RNG_FORMAT}; the checkpoint was written by an incompatible version")
    random.setstate(state["python"])
    np.random.set_state(_numpy_state_from_tensors(state["numpy"]))
    torch.set_rng_state(state["torch_cpu"])
    cuda_states = state.get("torch_cuda")
    if cuda_states is not None:
        if not torch.cuda.is_available() or torch.cuda.device_count() < len(cuda_states):
            raise ValueError(f"checkpoint holds RNG states of {len(cuda_states)} CUDA device(s) but this process sees {torch.cuda.device_count() if torch.cuda.is_available() else 0}; resume on the same device layout")
        torch.cuda.set_rng_state_all(cuda_states)


def _numpy_state_to_tensors(state: tuple) -> tuple:
    name, keys, pos, has_gauss, cached = state
    return name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)


def _numpy_state_from_tensors(state: tuple) -> tuple:
    name, keys, pos, has_gauss, cached = state
    return name, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, cached
