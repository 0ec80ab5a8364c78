"""Weight sync in buckets (distributed/weight_sync.py): sizes and dtypes of the buckets, the
rollout's weights after a bucketed sync equal the actor's (cast to the rollout's dtype) and the
whole-dict load, and the receiver keeps at most one bucket alive while loading.

The receiver side runs the real policy loader; the transport is a round trip through bytes
(what the object store does to a bucket), so each bucket is a fresh object the receiver owns."""
from __future__ import annotations

import dataclasses
import io
import weakref
from collections.abc import Iterator

import pytest
import torch

from embodied_rl.config.schema.model import model_config
from embodied_rl.distributed.weight_sync import load_buckets, make_buckets, nbytes
from embodied_rl.models import build_policy
from tests.actor_fixtures import ActorGroup, actor_config, make_tiny_model

BUCKET = 64 * 2**10  # small enough that the tiny policy travels in many buckets


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("sync_model"))


def _cfg(model_dir, precision: str = "fp32", **kw):
    cfg = model_config("openvla_oft", model_path=str(model_dir), add_value_head=True, value_type="chunk_level", **kw)
    return dataclasses.replace(cfg, precision=precision)


def _trained(model_dir, **kw) -> dict[str, torch.Tensor]:
    """An actor's trainable weights after some update: every tensor moved off the checkpoint."""
    sd = build_policy(_cfg(model_dir, **kw), warn_untrained_value_head=False).trainable_state_dict()
    g = torch.Generator().manual_seed(3)
    return {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in sd.items()}


class Wire:
    """Buckets serialised and read back one at a time (as the object store hands them out), with
    the bytes of received tensors still alive counted: `peak` is the most alive at once."""

    def __init__(self, buckets) -> None:
        self.blobs = []
        for b in buckets:
            buf = io.BytesIO()
            torch.save(b, buf)
            self.blobs.append(buf.getvalue())
        self.alive = self.peak = 0

    def _gone(self, n: int) -> None:
        self.alive -= n

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for blob in self.blobs:
            bucket = torch.load(io.BytesIO(blob), weights_only=True)
            for t in bucket.values():
                self.alive += nbytes(t)
                weakref.finalize(t, self._gone, nbytes(t))
            self.peak = max(self.peak, self.alive)
            yield bucket
            del bucket


def test_buckets_keep_order_and_size_and_cast_floats_only():
    tensors = [("a", torch.ones(100)), ("b", torch.ones(300)), ("ids", torch.arange(10)), ("c", torch.ones(50))]
    buckets = list(make_buckets(iter(tensors), torch.bfloat16, bucket_bytes=400))
    assert [list(b) for b in buckets] == [["a"], ["b"], ["ids", "c"]]  # "b" (600 B in bf16) is larger than a bucket: alone
    assert all(sum(nbytes(t) for t in b.values()) <= 400 or len(b) == 1 for b in buckets)
    flat = {k: v for b in buckets for k, v in b.items()}
    assert flat["a"].dtype == torch.bfloat16 and flat["ids"].dtype == torch.int64
    assert next(make_buckets(iter(tensors), None, bucket_bytes=10**6))["a"].dtype == torch.float32


def test_a_sync_missing_or_repeating_a_tensor_is_refused():
    loaded = []
    with pytest.raises(ValueError, match="never arrived"):
        load_buckets(loaded.append, [{"a": torch.ones(1)}], ["a", "b"])
    with pytest.raises(ValueError, match="sent twice"):
        load_buckets(loaded.append, [{"a": torch.ones(1)}, {"a": torch.ones(1)}], ["a"])
    with pytest.raises(ValueError, match="unexpected tensors"):
        load_buckets(loaded.append, [{"z": torch.ones(1)}], ["a"])


@pytest.mark.parametrize("lora", [False, True])
def test_bf16_rollout_after_bucketed_sync_equals_the_actor_cast_and_the_whole_dict_load(model_dir, lora):
    kw = {"is_lora": True, "lora_rank": 4} if lora else {}
    sent = _trained(model_dir, **kw)
    bucketed = build_policy(_cfg(model_dir, "bf16", **kw), warn_untrained_value_head=False)
    whole = build_policy(_cfg(model_dir, "bf16", **kw), warn_untrained_value_head=False)
    n = bucketed.load_trainable_buckets(Wire(make_buckets(sent.items(), torch.bfloat16, BUCKET)))
    whole.load_trainable_state_dict(sent)  # fp32 copied into bf16 weights: the route without buckets
    assert n > 3
    got, ref = bucketed.trainable_state_dict(), whole.trainable_state_dict()
    for k, v in sent.items():
        assert got[k].dtype == torch.bfloat16
        assert torch.equal(got[k], v.to(torch.bfloat16)), k
        assert torch.equal(got[k], ref[k]), k


def test_the_receiver_holds_one_bucket_at_a_time(model_dir):
    sent = _trained(model_dir)
    total = sum(nbytes(v.to(torch.bfloat16)) for v in sent.values())
    largest = max(nbytes(v.to(torch.bfloat16)) for v in sent.values())
    policy = build_policy(_cfg(model_dir, "bf16"), warn_untrained_value_head=False)
    whole = Wire([{k: v.to(torch.bfloat16) for k, v in sent.items()}])
    policy.load_trainable_buckets(whole)
    wire = Wire(make_buckets(sent.items(), torch.bfloat16, BUCKET))
    policy.load_trainable_buckets(wire)
    assert whole.peak == total
    assert wire.peak <= max(BUCKET, largest)
    assert wire.alive == whole.alive == 0  # the loader kept no received tensor
    assert total > 8 * BUCKET


def test_actor_shares_buckets_in_the_rollout_dtype_from_two_ranks(actor_hosts, model_dir):
    """2 FSDP ranks over gloo: rank 0's bucket references, fetched and loaded one at a time into
    a bf16 rollout policy, give the gathered fp32 weights cast to bf16."""
    import ray

    cfg = actor_config(model_dir, "actor.model.precision=bf16", "actor.fsdp_config.mixed_precision.param_dtype=fp32")
    with ActorGroup(actor_hosts, cfg, 2) as group:
        full, version = group.call("get_trainable_state_dict")[0]
        shared = group.call("share_trainable_state_dict")
    refs, shared_version = shared[0]
    assert shared[1] == (None, version) and shared_version == version
    buckets = [ray.get(r) for r in refs]
    assert {v.dtype for b in buckets for v in b.values()} == {torch.bfloat16}
    assert [k for b in buckets for k in b] == list(full)
    rollout = build_policy(_cfg(model_dir, "bf16"), warn_untrained_value_head=False)
    rollout.load_trainable_buckets(iter(buckets))
    got = rollout.trainable_state_dict()
    assert all(torch.equal(got[k], v.to(torch.bfloat16)) for k, v in full.items())
