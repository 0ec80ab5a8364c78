"""Reading and writing weights in the official HF layout (safetensors only, never pickle).

Layout: config.json, model.safetensors or model-0000i-of-0000N.safetensors +
model.safetensors.index.json, tokenizer files, preprocessor_config.json,
dataset_statistics.json; our RL extras beside them: value_head.safetensors,
proprio_projector.safetensors (official OFT `proprio_projector--*_checkpoint.pt` files are
read with torch.load(weights_only=True)).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from embodied_rl.errors import CheckpointError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def read_state_dict(ckpt_dir: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the main model (sharded with an index, or a single file)."""
    d = Path(ckpt_dir)
    if (d / INDEX_NAME).is_file():
        with open(d / INDEX_NAME) as f:
            weight_map: dict[str, str] = json.load(f)["weight_map"]
        sd: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not (d / shard).is_file():
                raise CheckpointError(f"{d / shard} listed in {INDEX_NAME} is missing; re-download or re-export the checkpoint")
            sd.update(load_file(str(d / shard)))
        absent = sorted(set(weight_map) - set(sd))
        if absent:
            raise CheckpointError(f"{d}: {len(absent)} tensors listed in {INDEX_NAME} are not in their shards, e.g. {', '.join(absent[:5])}")
        return sd
    if (d / SINGLE_NAME).is_file():
        return load_file(str(d / SINGLE_NAME))
    raise CheckpointError(f"{d} has no {INDEX_NAME} or {SINGLE_NAME}; model_path must be a checkpoint in the HF safetensors layout")


class TensorReader:
    """Single tensors of the main model by name, read from its memory-mapped files on demand:
    a reader holds no weights, only the files' maps (for consumers that need a few tensors at a
    time, e.g. folding LoRA adapters layer by layer)."""

    def __init__(self, ckpt_dir: str | Path) -> None:
        d = Path(ckpt_dir)
        if (d / INDEX_NAME).is_file():
            with open(d / INDEX_NAME) as f:
                self.weight_map: dict[str, str] = json.load(f)["weight_map"]
        elif (d / SINGLE_NAME).is_file():
            with safe_open(str(d / SINGLE_NAME), framework="pt") as f:
                self.weight_map = dict.fromkeys(f.keys(), SINGLE_NAME)
        else:
            raise CheckpointError(f"{d} has no {INDEX_NAME} or {SINGLE_NAME}; model_path must be a checkpoint in the HF safetensors layout")
        self.dir = d
        self._files: dict[str, Any] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self.weight_map)

    def __call__(self, name: str) -> torch.Tensor:
        if name not in self.weight_map:
            raise CheckpointError(f"{self.dir}: no tensor {name!r} in the main weights")
        file = self.weight_map[name]
        if file not in self._files:
            self._files[file] = safe_open(str(self.dir / file), framework="pt")
        return self._files[file].get_tensor(name)


def write_state_dict(sd: dict[str, torch.Tensor], ckpt_dir: str | Path, max_shard_bytes: int = 5 * 2**30) -> None:
    """Write `sd` as HF does: one model.safetensors, or numbered shards plus an index."""
    d = Path(ckpt_dir)
    d.mkdir(parents=True, exist_ok=True)
    tensors = _own_storages(sd)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = tensors[key]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(d / SINGLE_NAME), metadata={"format": "pt"})
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(d / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(d / INDEX_NAME, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def _own_storages(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of `sd` on the CPU, copied only where safetensors needs a copy (a view into a
    larger storage, a storage another tensor shares, non-contiguous memory): the weights are
    written from the model's own memory, so writing a 7B checkpoint does not hold a second 15 GB."""
    seen: set[int] = set()
    out = {}
    for k, v in sd.items():
        t = v.detach().to("cpu")
        storage = t.untyped_storage()
        if not t.is_contiguous() or storage.data_ptr() in seen or storage.nbytes() != t.numel() * t.element_size():
            t = t.contiguous().clone()
        seen.add(t.untyped_storage().data_ptr())
        out[k] = t
    return out


def load_exact(module: nn.Module, sd: dict[str, torch.Tensor], source: str, assign: bool = False) -> None:
    """load_state_dict that fails with one line naming missing / unexpected / mis-shaped tensors.

    assign=True adopts the checkpoint tensors (for modules built on the meta device).
    """
    expected = module.state_dict()
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    shapes = sorted(k for k in set(sd) & set(expected) if tuple(sd[k].shape) != tuple(expected[k].shape))
    problems = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape-mismatched", shapes)):
        if keys:
            problems.append(f"{len(keys)} {label} ({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''})")
    if problems:
        raise CheckpointError(f"{source} does not match the model built from its config.json: {'; '.join(problems)}")
    module.load_state_dict(sd, strict=True, assign=assign)


def check_materialized(module: nn.Module) -> None:
    """After a meta-device build: every parameter and buffer must hold real data."""
    left = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"tensors left uninitialised after loading: {', '.join(left[:6])}")


def save_component(module: nn.Module, path: str | Path) -> None:
    save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(path))


def read_component(ckpt_dir: str | Path, name: str) -> tuple[dict[str, torch.Tensor], str] | None:
    """`<name>.safetensors`, else an official `<name>--*_checkpoint.pt`; None when neither exists."""
    d = Path(ckpt_dir)
    if (d / f"{name}.safetensors").is_file():
        return load_file(str(d / f"{name}.safetensors")), str(d / f"{name}.safetensors")
    candidates = sorted(d.glob(f"{name}--*checkpoint.pt"))
    if not candidates:
        return None
    sd = torch.load(candidates[-1], map_location="cpu", weights_only=True)
    # OFT saves DDP-wrapped modules: strip the `module.` prefix.
    return {k.removeprefix("module."): v for k, v in sd.items()}, str(candidates[-1])
