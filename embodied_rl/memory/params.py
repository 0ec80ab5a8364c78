"""Parameter counts of a checkpoint without loading it: tensor shapes from safetensors headers.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming
every tensor's dtype and shape, so a 15 GB checkpoint is counted by reading a few kilobytes and
without importing torch. LoRA adapters are counted from the shapes of the layers they wrap, with
peft's matching rule (a target names a module or the last parts of its dotted name).
"""
from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Shapes = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of a policy as one actor rank trains it.

    total: every parameter (frozen base included); trainable: what gets gradients and optimizer
    state (all of them, or LoRA adapters plus the heads outside the adapted core);
    largest_unit: the biggest block FSDP gathers at once (a decoder layer or ViT block), for the
    all-gather working set; root_unit: the parameters outside every separately sharded block
    (embeddings, output head, stems), which FSDP's root keeps gathered from the forward through
    the backward; groups: total per component, for the plan's table."""
    total: int
    trainable: int
    largest_unit: int
    root_unit: int = 0
    groups: Mapping[str, int] = field(default_factory=dict)


def safetensors_shapes(path: Path) -> Shapes:
    """{tensor name: shape} from one .safetensors file's header."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def checkpoint_shapes(model_dir: Path, stem: str = "model") -> Shapes | None:
    """Shapes of `<stem>.safetensors`, or of the shards its `<stem>.safetensors.index.json` lists;
    None when neither exists."""
    single, index = model_dir / f"{stem}.safetensors", model_dir / f"{stem}.safetensors.index.json"
    if single.is_file():
        return safetensors_shapes(single)
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out: Shapes = {}
        for shard in shards:
            out.update(safetensors_shapes(model_dir / shard))
        return out
    return None


def numel(shapes: Shapes | Iterable[tuple[int, ...]]) -> int:
    values = shapes.values() if isinstance(shapes, Mapping) else shapes
    return sum(math.prod(s) for s in values)


def lora_parameter_count(shapes: Shapes, targets: Iterable[str], rank: int) -> int:
    """Parameters peft adds with LoRA rank `rank` on the modules matching `targets`: r x (in +
    out) per linear layer ([out, in] weight), r x (in x kh x kw) + out x r per convolution."""
    targets = list(targets)
    count = 0
    for name, shape in shapes.items():
        if not name.endswith(".weight"):
            continue
        module = name[: -len(".weight")]
        if not any(module == t or module.endswith("." + t) for t in targets):
            continue
        if len(shape) == 2:
            count += rank * (shape[1] + shape[0])
        elif len(shape) == 4:
            count += rank * shape[1] * shape[2] * shape[3] + shape[0] * rank
    return count


def repeated_blocks(shapes: Shapes, block_markers: Iterable[str] = (".layers.", ".blocks.")) -> dict[str, int]:
    """Parameters per repeated block (tensors sharing the prefix up to a block index): the units
    FSDP gathers one at a time."""
    blocks: dict[str, int] = {}
    for name, shape in shapes.items():
        for marker in block_markers:
            head, sep, tail = name.partition(marker)
            if sep and tail.split(".", 1)[0].isdigit():
                key = head + marker + tail.split(".", 1)[0]
                blocks[key] = blocks.get(key, 0) + math.prod(shape)
                break
    return blocks


def linear_count(*dims: int, bias_last: bool = True) -> int:
    """Parameters of an MLP of linear layers dims[0] -> dims[1] -> ... (biases on all but the
    last when bias_last is False)."""
    count = 0
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        count += a * b + (b if bias_last or i < len(dims) - 2 else 0)
    return count
