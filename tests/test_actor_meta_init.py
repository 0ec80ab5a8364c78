"""The actor's policy built on the meta device and loaded shard by shard (fsdp.build_sharded_policy)
equals the policy built whole on every rank and then sharded: every rank's shards, the
gathered weights, the buffers and which parameters train, over gloo with 2 ranks."""
from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import DTensor

from embodied_rl.models import build_policy
from embodied_rl.workers.actor import fsdp
from tests.actor_fixtures import ActorGroup, actor_config, make_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("meta_model"))


def _compare_with_eager(w) -> dict:
    """On each rank: the worker's (meta-built) policy against the eager build of the same config."""
    a = w.cfg.actor
    torch.manual_seed(a.seed)  # as the worker's set-up did before the eager build
    eager = build_policy(a.model, device=w.engine.device, dtype=torch.float32, init_seed=a.seed, warn_untrained_value_head=False)
    eager = fsdp.apply_fsdp2(eager, a.fsdp_config, w.world_size, w.engine.device)
    meta_params, eager_params = dict(w.policy.named_parameters()), dict(eager.named_parameters())
    shards_differ = [n for n, p in meta_params.items() if not torch.equal(p.to_local(), eager_params[n].to_local())]
    meta_buffers, eager_buffers = dict(w.policy.named_buffers()), dict(eager.named_buffers())
    buffers_differ = [n for n, b in meta_buffers.items() if b.dtype != eager_buffers[n].dtype or not torch.equal(b, eager_buffers[n])]
    full_meta, full_eager = fsdp.full_model_state_dict(w.policy), fsdp.full_model_state_dict(eager)
    return {
        "names": (list(meta_params) == list(eager_params), list(meta_buffers) == list(eager_buffers)),
        "all_dtensors": all(isinstance(p, DTensor) for p in meta_params.values()),
        "sharded": any(p.to_local().numel() < p.numel() for p in meta_params.values()),
        "shards_differ": shards_differ, "buffers_differ": buffers_differ,
        "trainable": [n for n, p in meta_params.items() if p.requires_grad] == [n for n, p in eager_params.items() if p.requires_grad],
        "full_differ": [k for k in full_eager if k not in full_meta or not torch.equal(full_meta[k], full_eager[k])],
        "full_count": len(full_eager), "meta_left": [n for n, p in meta_params.items() if p.to_local().is_meta],
    }


@pytest.mark.parametrize("overrides", [("actor.model.is_lora=true", "actor.model.lora_rank=4"), ()], ids=["lora", "full"])
def test_meta_built_sharded_policy_equals_the_eager_build_tensor_for_tensor(actor_hosts, model_dir, overrides):
    cfg = actor_config(model_dir, *overrides)  # with a fresh value head (and fresh LoRA): random parts travel too
    with ActorGroup(actor_hosts, cfg, 2) as group:
        ranks = group.run(_compare_with_eager)
    for rank, r in enumerate(ranks):
        assert r["names"] == (True, True) and r["all_dtensors"] and r["sharded"] and r["trainable"], (rank, r)
        assert r["shards_differ"] == [] and r["buffers_differ"] == [] and r["meta_left"] == [], (rank, r)
    assert ranks[0]["full_count"] > 100 and ranks[0]["full_differ"] == []
