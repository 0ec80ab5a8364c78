"""Checkpoints: exact resume of the FSDP2 actor (world size 2) and the driver, atomic saves.

Exactness is shown the strict way: a fresh actor group restored from the checkpoint takes
the next training step bit-for-bit like the group that never stopped (weights, AdamW
moments and step counts, LR schedule in warm-up, minibatch shuffle, per-rank RNG). The
actor's part is sharded (torch.distributed.checkpoint): each rank writes its own shards.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random

import numpy as np
import pytest
import torch

from embodied_rl.errors import CheckpointError
from embodied_rl.models import build_policy
from embodied_rl.runtime.checkpoint import (
    actor_dir,
    checkpoint_writer,
    export_policy,
    latest_checkpoint,
    load_runner_state,
    resolve_resume_dir,
    write_runner_state,
)
from embodied_rl.workers.actor.checkpoint import read_trainable_weights
from tests.actor_fixtures import (
    ActorGroup,
    actor_config,
    make_rollout_batch,
    make_tiny_model,
)


def _save(run_dir, step: int, extra: dict | None = None, actors: ActorGroup | None = None, version: int = 0):
    with checkpoint_writer(run_dir, step) as tmp:
        if actors is not None:
            actors.call("save_checkpoint", str(actor_dir(tmp)))
        write_runner_state(tmp, global_step=step, weight_version=version, config_yaml="runner: {}\n", extra=extra)
    return latest_checkpoint(run_dir)


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model = make_tiny_model(tmp_path_factory.mktemp("ckpt_model"))
    # Warm-up makes the LR differ per step, so a scheduler that was not restored shows.
    cfg = actor_config(model, "actor.model.is_lora=true", "actor.model.lora_rank=4",
                       "actor.optim.lr_warmup_steps=3", "actor.optim.lr_scheduler=cosine")
    return cfg, make_rollout_batch(cfg, seed=1), make_rollout_batch(cfg, seed=2)


def _local_optimizer_state(w) -> list[dict[str, torch.Tensor]]:
    """This rank's AdamW state (its shards), in parameter order."""
    local = lambda v: (v.to_local() if hasattr(v, "to_local") else v).clone()
    return [{k: local(v) for k, v in w.engine.optimizer.state[p].items()} for g in w.engine.optimizer.param_groups for p in g["params"]
            if p in w.engine.optimizer.state]


def test_resume_is_bit_exact(actor_hosts, setup, tmp_path):
    cfg, batch1, batch2 = setup
    rank_draw = lambda w: torch.rand(4)
    with ActorGroup(actor_hosts, cfg, 2) as a:
        a.call("train_step", batch1)
        ckpt = _save(tmp_path, 1, extra={"reset_ids": [3, 1, 2]}, actors=a, version=2)
        optim_saved = a.run(_local_optimizer_state)
        w_saved = a.call("get_trainable_state_dict")[0][0]
        driver_after_save = _draws()
        m2 = a.call("train_step", batch2)[0]
        w2, v2 = a.call("get_trainable_state_dict")[0]
        r2 = a.run(rank_draw)
    assert ckpt is not None and ckpt.name == "global_step_00000001"

    state = load_runner_state(resolve_resume_dir("latest", tmp_path))
    assert (state.global_step, state.weight_version, state.extra) == (1, 2, {"reset_ids": [3, 1, 2]})
    resumed_draws = _draws()
    assert resumed_draws[:2] == driver_after_save[:2] and torch.equal(resumed_draws[2], driver_after_save[2])

    # Every rank wrote its own shards; no rank gathered the weights or the optimizer.
    assert sorted(p.name for p in (actor_dir(ckpt) / "dcp").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert sorted(p.name for p in actor_dir(ckpt).iterdir()) == ["actor_state.pt", "dcp"]
    with ActorGroup(actor_hosts, cfg, 2) as b:
        assert b.call("load_checkpoint", str(actor_dir(ckpt))) == [2, 2]
        optim_loaded = b.run(_local_optimizer_state)
        m2b = b.call("train_step", batch2)[0]
        w2b, v2b = b.call("get_trainable_state_dict")[0]
        r2b = b.run(rank_draw)
    assert v2b == v2 == 3
    assert [len(s) for s in optim_saved] == [len(s) for s in optim_loaded] and len(optim_saved[0]) > 0
    for saved, loaded in zip(optim_saved, optim_loaded):  # per rank: AdamW step, moments
        assert all(s.keys() == x.keys() and all(torch.equal(s[k], x[k]) for k in s) for s, x in zip(saved, loaded))
    assert m2b == m2  # every metric, exactly (lr included: the schedule is at step 2 of warm-up)
    assert m2["train/actor/lr"] == pytest.approx(cfg.actor.optim.lr * 2 / 3)
    assert set(w2b) == set(w2) and all(torch.equal(w2b[k], w2[k]) for k in w2)
    assert all(torch.equal(x, y) for x, y in zip(r2, r2b)) and not torch.equal(r2[0], r2[1])

    # Full (unsharded) optimizer state: the same checkpoint resumes on one rank too.
    with ActorGroup(actor_hosts, cfg, 1) as c:
        assert c.call("load_checkpoint", str(actor_dir(ckpt))) == [2]
        m2c = c.call("train_step", batch2)[0]
        w2c = c.call("get_trainable_state_dict")[0][0]
    assert m2c["train/actor/lr"] == m2["train/actor/lr"]
    for k in w2:
        torch.testing.assert_close(w2c[k], w2[k], rtol=1e-4, atol=1e-6, msg=k)

    merged = export_policy(ckpt, cfg.actor.model, tmp_path / "export")
    plain_cfg = type(cfg.actor.model)(**{**vars(cfg.actor.model), "is_lora": False, "model_path": str(merged)})
    plain = build_policy(plain_cfg, dtype=torch.float32).eval()
    lora = build_policy(cfg.actor.model, dtype=torch.float32).eval()
    offline = read_trainable_weights(actor_dir(ckpt))  # full tensors from the shards, no process group
    assert offline.keys() == w_saved.keys() and all(torch.equal(v, w_saved[k]) for k, v in offline.items())
    lora.load_trainable_state_dict(offline)
    fi = {k: v[0] for k, v in batch1.forward_inputs.items()}
    with torch.no_grad():
        a_out = lora.evaluate_actions(fi, batch1.action_record[0])
        b_out = plain.evaluate_actions(fi, batch1.action_record[0])
    torch.testing.assert_close(a_out["logprobs"], b_out["logprobs"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a_out["values"], b_out["values"])


def _crash_while_saving(run_dir) -> None:
    with checkpoint_writer(run_dir, 2) as tmp:
        (tmp / "runner_state.pt").write_bytes(b"half a file")
        os._exit(1)  # the process dies mid-save: no cleanup code runs


def test_crash_mid_save_leaves_previous_checkpoint(tmp_path):
    first = _save(tmp_path, 1, extra={"k": 1})
    with pytest.raises(RuntimeError, match="boom"), checkpoint_writer(tmp_path, 2) as tmp:
        (tmp / "config.yaml").write_text("partial")
        raise RuntimeError("boom")
    proc = mp.get_context("fork").Process(target=_crash_while_saving, args=(tmp_path,))
    proc.start()
    proc.join()
    assert proc.exitcode == 1
    root = tmp_path / "checkpoints"
    assert [p.name for p in root.glob(".tmp-*")]  # the dead process's half directory
    (root / "global_step_00000003").mkdir()  # e.g. a copy without meta.json
    assert latest_checkpoint(tmp_path) == first == resolve_resume_dir("latest", tmp_path)
    assert resolve_resume_dir(str(tmp_path), tmp_path) == first  # a run directory resolves too
    assert load_runner_state(first).extra == {"k": 1}
    with pytest.raises(CheckpointError, match="incomplete or not a checkpoint"):
        resolve_resume_dir(str(root / "global_step_00000003"), tmp_path)
    second = _save(tmp_path, 2)
    assert second.name == "global_step_00000002" and not list(root.glob(".tmp-*"))
    assert (root / "latest").read_text().strip() == "global_step_00000002"
    # the pointer file itself, as a shell completes it (export, eval's runner.ckpt_path)
    assert resolve_resume_dir(str(root / "latest"), "elsewhere") == second


def test_resume_dir_errors_are_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        resolve_resume_dir("latest", tmp_path)
    with pytest.raises(CheckpointError, match="no such directory"):
        resolve_resume_dir(str(tmp_path / "nope"), tmp_path)
    with pytest.raises(CheckpointError, match="no trainable weights under actor/"):
        export_policy(tmp_path, None, tmp_path / "out")


def test_a_flash_attention_gpu_run_exports_and_replays_on_the_cpu(tmp_path):
    """A run's saved config names flash_attention_2 (and GPUs, cpu_offload, an 8-GPU placement):
    `embodied-rl export` and `checkpoint_policy` build it on the CPU with sdpa, from
    the checkpoint's own weights, and the run's config keeps the kernel it trained with."""
    import dataclasses

    from safetensors.torch import save_file

    from embodied_rl.cli.export import export
    from embodied_rl.config.loader import to_yaml
    from embodied_rl.configure import load_config
    from embodied_rl.distributed.resources import Resources
    from embodied_rl.replay import checkpoint_policy
    from embodied_rl.runtime.checkpoint import ACTOR_WEIGHTS

    model = make_tiny_model(tmp_path)
    cfg = load_config("maniskill_ppo_tiny", [
        f"actor.model.model_path={model}", "actor.model.create_preset=null", "actor.model.attn_implementation=flash_attention_2",
        "actor.model.precision=bf16", "actor.fsdp_config.cpu_offload=true", "cluster.component_placement={actor: 0-7, env: all, rollout: all}",
    ], resources=Resources(1, 8, "gpu"))
    sdpa = dataclasses.replace(cfg.actor.model, attn_implementation="sdpa")
    trained = {k: v + 0.01 for k, v in build_policy(sdpa, dtype=torch.float32).trainable_state_dict().items()}
    run = tmp_path / "run"
    with checkpoint_writer(run, 1) as tmp:
        actor_dir(tmp).mkdir(parents=True)
        save_file(trained, str(actor_dir(tmp) / ACTOR_WEIGHTS))
        write_runner_state(tmp, global_step=1, weight_version=2, config_yaml=to_yaml(cfg))

    out = export(str(run), tmp_path / "export")
    exported = build_policy(dataclasses.replace(sdpa, model_path=str(out)), dtype=torch.float32).trainable_state_dict()
    assert set(exported) == set(trained) and all(torch.equal(exported[k], v) for k, v in trained.items())

    run_cfg, policy = checkpoint_policy(run)
    assert run_cfg.actor.model.attn_implementation == "flash_attention_2" and policy.vla.attn_implementation == "sdpa"
    replayed = policy.trainable_state_dict()
    assert all(torch.equal(replayed[k], v.to(replayed[k].dtype)) for k, v in trained.items())


def test_weights_are_written_from_their_own_memory_and_read_back_exactly(tmp_path):
    from embodied_rl.models.openvla_oft.checkpoint import (
        read_state_dict,
        write_state_dict,
    )

    base = torch.arange(24, dtype=torch.float32)
    sd = {"owned": torch.randn(4, 6), "view": base[6:18].view(3, 4), "shared_a": base, "transposed": torch.randn(3, 5).t(),
          "bf16": torch.randn(8, dtype=torch.bfloat16)}
    sd["shared_b"] = sd["shared_a"]
    write_state_dict(sd, tmp_path, max_shard_bytes=64)  # several shards and an index
    back = read_state_dict(tmp_path)
    assert set(back) == set(sd) and all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in sd.items())
    from embodied_rl.models.openvla_oft.checkpoint import _own_storages

    owned = _own_storages(sd)
    # a tensor that owns its contiguous storage is written from it, without a copy
    assert owned["owned"].data_ptr() == sd["owned"].data_ptr() and owned["bf16"].data_ptr() == sd["bf16"].data_ptr()
    # views, shared storages and non-contiguous tensors get their own copy (safetensors needs it)
    ptrs = [owned[k].untyped_storage().data_ptr() for k in ("view", "shared_a", "shared_b", "transposed")]
    assert len(set(ptrs)) == 4 and owned["transposed"].is_contiguous()
