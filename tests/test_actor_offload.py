"""actor.enable_offload: the runner offloads the actor after every weight sync and each training
call moves the state back first. Refused without GPUs at config load, so here the worker's own
round trip runs on a CPU worker whose config enables it after loading: offloaded, then trained,
it gives the update of a worker that never offloaded."""
from __future__ import annotations

import torch

from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.workers.actor import fsdp
from embodied_rl.workers.actor.worker import ActorWorker
from tests.actor_fixtures import actor_config, make_rollout_batch, make_tiny_model


def _two_steps(cfg, batch: RolloutBatch, offload: bool) -> tuple[list[dict], torch.Tensor, list[bool]]:
    worker = ActorWorker(cfg, 0, 1)
    flags = []
    try:
        worker.setup("127.0.0.1", fsdp.free_port())
        metrics = []
        for _ in range(2):
            if offload:
                worker.offload()
                flags.append(worker.engine.offloaded)
            metrics.append(worker.train_step(batch))
            flags.append(worker.engine.offloaded)
        weights = torch.cat([p.detach().full_tensor().flatten() for p in worker.policy.parameters()])
    finally:
        worker.shutdown()
    return metrics, weights, flags


def test_an_offloaded_actor_trains_as_one_that_never_left(tmp_path) -> None:
    cfg = actor_config(make_tiny_model(tmp_path))
    batch = make_rollout_batch(cfg)
    plain, w_plain, _ = _two_steps(cfg, batch, offload=False)
    cfg.actor.enable_offload = True  # the plan refuses it on CPU; the worker's bookkeeping runs anyway
    moved, w_moved, flags = _two_steps(cfg, batch, offload=True)
    assert flags == [True, False, True, False]  # offloaded after each sync, back for each training call
    assert torch.equal(w_plain, w_moved)
    assert [{k: v for k, v in m.items() if not k.startswith("time/")} for m in plain] == \
           [{k: v for k, v in m.items() if not k.startswith("time/")} for m in moved]
