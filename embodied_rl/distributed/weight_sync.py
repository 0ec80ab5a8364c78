"""Weight sync in buckets, actor rank 0 -> rollout workers.

The trainable tensors travel as a sequence of buckets (dicts of whole tensors, about
`BUCKET_BYTES` each), already cast to the rollout's dtype by the sender, so a bf16 rollout
receives bf16. The receiver fetches, loads and drops one bucket before the next: its extra
memory during a sync is about one bucket, whatever the model's size, instead of the whole
state dict (and, on a GPU, the whole dict again on the device).

Sender (actor, every rank takes part in the gathers; rank 0 yields):
    for bucket in make_buckets(fsdp.iter_full(sd, rank), dtype): ray.put(bucket)
Receiver (rollout worker):
    policy.load_trainable_buckets(received_buckets(refs))          # see load_buckets
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

#: Size of one bucket. Large enough that a 7.5B model travels in ~60 fp32 / ~30 bf16 puts (the
#: per-object overhead of the object store is negligible), small enough to be noise beside the
#: rollout's own weights. Nobody has needed to tune it, so it is not a config key.
BUCKET_BYTES = 256 * 2**20


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def cast_for_rollout(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A CPU copy of `t`, floating point ones in `dtype` (None: as they are); integer tensors keep theirs."""
    target = dtype if dtype is not None and t.is_floating_point() else t.dtype
    return t.detach().to(device="cpu", dtype=target, copy=True)


def make_buckets(tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None,
                 bucket_bytes: int = BUCKET_BYTES) -> Iterator[dict[str, torch.Tensor]]:
    """Group (name, tensor) pairs, in order, into dicts of CPU tensors in `dtype` (see
    cast_for_rollout) of at most `bucket_bytes`; a tensor larger than that travels alone.
    Lazy: each tensor is cast as it arrives, so the sender holds one bucket at a time too."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in tensors:
        t = cast_for_rollout(tensor, dtype)
        if bucket and size + nbytes(t) > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = t
        size += nbytes(t)
    if bucket:
        yield bucket


def received_buckets(weights: dict[str, torch.Tensor] | list) -> Iterator[dict[str, torch.Tensor]]:
    """What a receiver iterates: a whole state dict as one bucket, or a list of object-store
    references to buckets, each fetched (ray.get) only when the loop reaches it."""
    if isinstance(weights, dict):
        yield weights
        return
    import ray

    for ref in weights:
        yield ray.get(ref)


def load_buckets(load: Callable[[dict[str, torch.Tensor]], None], buckets: Iterable[dict[str, torch.Tensor]],
                 expected: Iterable[str]) -> int:
    """Feed each bucket to `load` (which copies its tensors into the model and keeps none), then
    drop it before taking the next; afterwards every expected name must have come exactly once.
    Returns the number of buckets. A bucket with a name outside `expected` fails before loading."""
    want = set(expected)
    seen: set[str] = set()
    count = 0
    for bucket in buckets:
        unexpected = sorted(set(bucket) - want)
        repeated = sorted(set(bucket) & seen)
        if unexpected or repeated:
            raise ValueError(f"weight sync: unexpected tensors {unexpected[:5]}, sent twice {repeated[:5]} "
                             "(is_lora/add_value_head must match on both sides)")
        load(bucket)
        seen.update(bucket)
        count += 1
        del bucket  # the iterator's next bucket must not be fetched while this one is alive
    missing = sorted(want - seen)
    if missing:
        raise ValueError(f"weight sync: {len(missing)} trainable tensors never arrived, e.g. {missing[:5]}")
    return count
