"""ActorWorker: FSDP2 over gloo with world size 2 (Ray actors) training the real tiny OFT policy.

One module-scoped LoRA+value-head group of 2 ranks and world-size-1 groups give: sharding
is real (DTensors), only trainable tensors change, world 2 == world 1 on the same global
batch, gradient accumulation == one big micro-batch, and value_lr drives the value head.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from embodied_rl.errors import ConfigError
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.workers.actor import fsdp
from embodied_rl.workers.actor.batch import check_batch_sizes
from embodied_rl.workers.actor.optim import lr_multiplier
from tests.actor_fixtures import (
    ActorGroup,
    actor_config,
    counting_collectives,
    counting_host_reads,
    demos_from_batch,
    fsdp_facts,
    make_rollout_batch,
    make_tiny_model,
    sft_step,
)

LORA = ("actor.model.is_lora=true", "actor.model.lora_rank=4")


def full_state(group: ActorGroup) -> dict[str, torch.Tensor]:
    """Every parameter (frozen ones too), unsharded, from rank 0."""
    return group.run(lambda w: fsdp.full_model_state_dict(w.policy))[0]


def train_once(hosts: list, cfg, world: int, batch: RolloutBatch) -> tuple[dict, dict, dict]:
    with ActorGroup(hosts, cfg, world) as group:
        before = group.call("get_trainable_state_dict")[0][0]
        metrics = group.call("train_step", batch)[0]
        after, version = group.call("get_trainable_state_dict")[0]
    assert version == 2
    return before, after, metrics


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("actor_model"))


@pytest.fixture(scope="module")
def lora_cfg(model_dir):
    return actor_config(model_dir, *LORA)


@pytest.fixture(scope="module")
def batch(lora_cfg):
    return make_rollout_batch(lora_cfg)


@pytest.fixture(scope="module")
def world2(actor_hosts, lora_cfg, batch):
    """World size 2 over gloo: state before/after one train step, metrics, sharding facts."""
    with ActorGroup(actor_hosts, lora_cfg, 2) as group:
        sharding = group.run(lambda w: (
            fsdp.is_sharded(w.policy), sum(p.to_local().numel() for p in w.policy.parameters()),
            sum(p.numel() for p in w.policy.parameters()), torch.distributed.get_backend()))
        full_before = full_state(group)
        metrics = group.call("train_step", batch)[0]
        full_after = full_state(group)
        trainable_after, version = group.call("get_trainable_state_dict")[0]
    return {"sharding": sharding, "before": full_before, "after": full_after, "metrics": metrics,
            "trainable": trainable_after, "version": version}


def test_world2_is_really_sharded_over_gloo(world2):
    for is_dtensor, local, full, backend in world2["sharding"]:
        assert is_dtensor and backend == "gloo"
        assert local < 0.6 * full  # each rank holds about half of every parameter


def test_loss_finite_and_only_trainable_tensors_change(world2, lora_cfg):
    m = world2["metrics"]
    assert all(math.isfinite(m[k]) for k in ("train/actor/total_loss", "train/actor/policy_loss", "train/critic/value_loss", "train/actor/grad_norm"))
    assert m["train/actor/optimizer_steps"] == 2  # 16 samples / global batch 8
    assert m["train/actor/lr"] == lora_cfg.actor.optim.lr and m["train/critic/lr"] == lora_cfg.actor.optim.value_lr
    trainable = set(world2["trainable"])
    assert any("lora_" in k for k in trainable) and any(k.startswith("value_head.") for k in trainable)
    changed = {k for k, v in world2["before"].items() if not torch.equal(v, world2["after"][k])}
    frozen = set(world2["before"]) - trainable
    assert frozen and not (changed & frozen), sorted(changed & frozen)[:5]
    assert any(k.startswith("value_head.") for k in changed) and any("lora_B" in k for k in changed)
    assert world2["version"] == 2


def test_world2_equals_world1_on_same_global_batch(world2, actor_hosts, lora_cfg, batch):
    _, after1, metrics1 = train_once(actor_hosts, lora_cfg, 1, batch)
    after2 = world2["trainable"]
    assert set(after1) == set(after2)
    for k in after1:
        torch.testing.assert_close(after2[k], after1[k], rtol=1e-4, atol=1e-6, msg=k)
    assert metrics1["train/actor/policy_loss"] == pytest.approx(world2["metrics"]["train/actor/policy_loss"], rel=1e-4, abs=1e-6)


def test_gradient_checkpointing_under_fsdp2_gives_the_same_update(world2, actor_hosts, model_dir, batch):
    cfg = actor_config(model_dir, *LORA, "actor.model.gradient_checkpointing=true")
    _, after, _ = train_once(actor_hosts, cfg, 1, batch)
    for k, v in world2["trainable"].items():
        torch.testing.assert_close(after[k], v, rtol=1e-4, atol=1e-6, msg=k)


def test_grad_accumulation_equals_one_big_micro_batch(actor_hosts, model_dir, batch):
    cfg_accum = actor_config(model_dir, "actor.micro_batch_size=2", "actor.global_batch_size=8")
    cfg_big = actor_config(model_dir, "actor.micro_batch_size=8", "actor.global_batch_size=8")
    before, after_accum, _ = train_once(actor_hosts, cfg_accum, 1, batch)
    _, after_big, _ = train_once(actor_hosts, cfg_big, 1, batch)
    for k in after_big:
        torch.testing.assert_close(after_accum[k], after_big[k], rtol=1e-4, atol=1e-6, msg=k)
    assert any(not torch.equal(before[k], after_big[k]) for k in before)


def test_gradients_are_reduce_scattered_once_per_optimizer_step_with_the_same_update(actor_hosts, model_dir, batch):
    """Two ranks, PPO micro-batches then the BC term's demo micro-batches before each optimizer
    step, and SFT steps: with twice the micro-batches (hence backwards) per optimizer step, FSDP
    issues as many reduce-scatters (the last backward syncs, the others accumulate unsharded)
    and the weights come out the same."""
    runs = {}
    for micro in (4, 2):  # per rank and optimizer step: 1 or 2 PPO micro-batches, as many demo ones
        cfg = actor_config(model_dir, *LORA, f"actor.micro_batch_size={micro}")
        # Set after the config checks, which ask for demo files; the demos are the batch's samples.
        cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, bc_coef=0.5))
        with ActorGroup(actor_hosts, cfg, 2) as group:
            group.run(demos_from_batch(batch))
            train = group.run(counting_collectives("train_step", batch))
            sft = group.run(counting_collectives(sft_step))
            runs[micro] = ([n for _, n in train], [n for _, n in sft], train[0][0], group.call("get_trainable_state_dict")[0][0])
    (train4, sft4, metrics4, after4), (train2, sft2, metrics2, after2) = runs[4], runs[2]
    assert metrics4["train/actor/optimizer_steps"] == metrics2["train/actor/optimizer_steps"] == 2
    assert "train/actor/bc_nll" in metrics2
    assert train2 == train4 and sft2 == sft4 and min(sft4) > 0 and train4[0] % 2 == 0, (train2, train4, sft2, sft4)
    for k in after4:
        torch.testing.assert_close(after2[k], after4[k], rtol=1e-4, atol=1e-6, msg=k)


def test_a_sharded_full_fine_tune_keeps_reducing_every_micro_batch(actor_hosts, model_dir, batch):
    """Deferring would hold full-size gradients of every weight on each rank: a full fine-tune
    over 2 sharded ranks reduce-scatters per backward, so twice the micro-batches, twice the calls."""
    counts = {}
    for micro in (4, 2):
        with ActorGroup(actor_hosts, actor_config(model_dir, f"actor.micro_batch_size={micro}"), 2) as group:
            counts[micro] = [n for _, n in group.run(counting_collectives("train_step", batch))]
    assert min(counts[4]) > 0 and counts[2] == [2 * n for n in counts[4]], counts


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_bf16_compute_with_gradient_accumulation_trains(actor_hosts, model_dir, batch, lora):
    """Mixed precision with several micro-batches per optimizer step: FSDP2 frees the bf16 copies
    after each backward, so the gradients are reduced every micro-batch instead of accumulating
    unsharded (that accumulation failed in FSDP2's post-backward); the step is close to fp32's."""
    base = (*(LORA if lora else ()), "actor.micro_batch_size=2", "actor.global_batch_size=8")
    before, after_fp32, _ = train_once(actor_hosts, actor_config(model_dir, *base), 1, batch)
    _, after_bf16, metrics = train_once(actor_hosts, actor_config(model_dir, *base, "actor.fsdp_config.mixed_precision.param_dtype=bf16"), 1, batch)
    assert all(math.isfinite(v) for v in metrics.values())
    moved = [k for k in before if not torch.equal(before[k], after_bf16[k])]
    assert moved and all(after_bf16[k].dtype == torch.float32 for k in moved)  # fp32 master weights
    # bf16 compute, fp32 update: the step goes the way fp32's does, within bf16's precision
    step32 = torch.cat([(after_fp32[k] - before[k]).flatten() for k in moved])
    step16 = torch.cat([(after_bf16[k] - before[k]).flatten() for k in moved])
    assert torch.nn.functional.cosine_similarity(step32, step16, dim=0) > 0.9


def test_metrics_reach_the_host_once_per_step_not_per_micro_batch(actor_hosts, model_dir, batch):
    """The loss metrics stay device tensors until the step's end: a training step with four
    times the micro-batches reads no more values to the host (each read syncs on a GPU)."""
    reads, keys = {}, {}
    for micro in (4, 1):  # per rank: 2 or 8 micro-batches in the step's 2 optimizer steps
        with ActorGroup(actor_hosts, actor_config(model_dir, *LORA, f"actor.micro_batch_size={micro}"), 2) as group:
            (metrics, reads[micro]), _ = group.run(counting_host_reads("train_step", batch))
        keys[micro] = set(metrics)
        assert all(isinstance(v, float) for v in metrics.values())  # explained variance: nan on 1-sample micro-batches
    assert keys[1] == keys[4] and "train/critic/explained_variance" in keys[1]
    assert reads[1] == reads[4], reads


def test_value_lr_group_drives_the_value_head(actor_hosts, model_dir, batch):
    cfg = actor_config(model_dir, "actor.optim.lr=0.0", "actor.optim.value_lr=0.01", "actor.optim.min_lr=0.0")
    before, after, metrics = train_once(actor_hosts, cfg, 1, batch)
    assert metrics["train/actor/lr"] == 0.0 and metrics["train/critic/lr"] == 0.01
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("value_head.") for k in changed), sorted(changed)[:5]


def test_critic_warmup_moves_only_the_value_head_then_the_policy(actor_hosts, model_dir, batch):
    cfg = actor_config(model_dir, "runner.critic_warmup=1")
    with ActorGroup(actor_hosts, cfg, 1) as group:
        states = [group.call("get_trainable_state_dict")[0][0]]
        metrics = []
        for _ in range(2):
            metrics.append(group.call("train_step", batch)[0])
            states.append(group.call("get_trainable_state_dict")[0][0])
    changed = [{k for k in states[0] if not torch.equal(states[i][k], states[i + 1][k])} for i in range(2)]
    assert changed[0] and all(k.startswith("value_head.") for k in changed[0]), sorted(changed[0])[:5]
    assert any(not k.startswith("value_head.") for k in changed[1])
    assert [m["train/critic/warmup"] for m in metrics] == [1.0, 0.0]
    assert metrics[0]["train/actor/lr"] == 0.0 and metrics[1]["train/actor/lr"] == cfg.actor.optim.lr


def test_grpo_batch_without_critic_trains(actor_hosts, model_dir):
    cfg = actor_config(model_dir, "algorithm.adv_type=grpo", "algorithm.group_size=2", "env.train.group_size=2",
                       "actor.model.add_value_head=false")
    before, after, metrics = train_once(actor_hosts, cfg, 1, make_rollout_batch(cfg))
    assert math.isfinite(metrics["train/actor/total_loss"]) and "train/critic/lr" not in metrics
    assert not any(k.startswith("train/critic/value") for k in metrics)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_lr_schedule_warmup_then_decay():
    f = lambda s, kind: lr_multiplier(s, kind=kind, warmup_steps=2, total_steps=6, min_ratio=0.1)
    assert [f(s, "constant") for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert f(2, "cosine") == pytest.approx(1.0) and f(5, "cosine") == pytest.approx(0.1)
    assert f(2, "linear") == pytest.approx(1.0) and f(5, "linear") == pytest.approx(0.1)
    assert f(3, "cosine") > f(3, "linear") > f(4, "linear")


def test_bad_batch_sizes_are_one_line_errors():
    # The config checks run the same function before anything starts (tests/test_bad_configs.py
    # has the CPU-only and precision rules, which are config checks too).
    with pytest.raises(ConfigError, match="micro_batch_size x actor processes"):
        check_batch_sizes(16, global_batch=8, micro=4, world=4)
    with pytest.raises(ConfigError, match="must divide the rollout batch of 12 samples"):
        check_batch_sizes(12, global_batch=8, micro=4, world=1)


@pytest.mark.parametrize("overrides, expect", [
    ((), {"param_dtype": torch.float32, "reshard_after_forward": True, "placements": ["Shard"], "local_fraction": 0.5}),
    (("actor.fsdp_config.sharding_strategy=shard_grad_op", "actor.fsdp_config.mixed_precision.param_dtype=bf16"),
     {"param_dtype": torch.bfloat16, "reshard_after_forward": False, "placements": ["Shard"]}),
    (("actor.fsdp_config.sharding_strategy=no_shard",), {"placements": ["Replicate", "Shard"], "local_fraction": 1.0}),
    # LoRA in bf16: the frozen base is stored in bf16 (no fp32 master), the adapters and heads in fp32
    ((*LORA, "actor.fsdp_config.mixed_precision.param_dtype=bf16"),
     {"param_dtype": torch.bfloat16, "stored": {"trainable": {torch.float32}, "frozen": {torch.bfloat16}}}),
    (LORA, {"stored": {"trainable": {torch.float32}, "frozen": {torch.float32}}}),
])
def test_fsdp_config_keys_take_effect(actor_hosts, model_dir, overrides, expect):
    with ActorGroup(actor_hosts, actor_config(model_dir, *overrides), 2) as group:
        facts = group.run(fsdp_facts)
    for f in facts:
        assert f["reduce_dtype"] == torch.float32
        assert {k: f[k] for k in expect} == expect
        assert f["buffer_dtypes"] == {torch.float32}  # RoPE frequencies stay fp32 whatever param_dtype is


def test_process_group_covers_cpu_tensors_on_a_gpu() -> None:
    """With cpu_offload a GPU rank's shards, gradients and their norms are CPU tensors: its group
    pairs NCCL with gloo. (A CPU-only torch has no NCCL to start that group with; the CPU path of
    the same collectives runs in the cpu_offload test below.)"""
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    mixed = fsdp.process_group_backend(torch.device("cuda", 1))
    assert BackendConfig(Backend(mixed)).get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    assert fsdp.process_group_backend(torch.device("cpu")) == "gloo"


def test_cpu_offload_trains_gathers_and_resumes_like_the_run_without(world2, actor_hosts, model_dir, batch, tmp_path):
    """FSDP2's CPUOffloadPolicy over gloo: the update, the weight gather, gradient clipping and
    the checkpoint broadcast on offloaded shards give what the run without offload gives."""
    cfg = actor_config(model_dir, *LORA, "actor.fsdp_config.cpu_offload=true")
    on_cpu = lambda w: {p.to_local().device.type for p in w.policy.parameters()} | {
        type(g.offload_policy).__name__ for g in [w.policy.fsdp_units()[0]._get_fsdp_state()._fsdp_param_group]}
    with ActorGroup(actor_hosts, cfg, 2) as group:
        facts = group.run(on_cpu)
        metrics = group.call("train_step", batch)[0]
        after, version = group.call("get_trainable_state_dict")[0]
        group.call("save_checkpoint", str(tmp_path / "actor"))
    assert facts == [{"cpu", "CPUOffloadPolicy"}] * 2 and version == 2
    assert metrics["train/actor/grad_norm"] == pytest.approx(world2["metrics"]["train/actor/grad_norm"], rel=1e-5)
    for k, v in world2["trainable"].items():
        torch.testing.assert_close(after[k], v, rtol=1e-5, atol=1e-7, msg=k)
    with ActorGroup(actor_hosts, cfg, 2) as group:
        assert group.call("load_checkpoint", str(tmp_path / "actor")) == [2, 2]
        loaded = group.call("get_trainable_state_dict")[0][0]
    assert all(torch.equal(loaded[k], v) for k, v in after.items())


PRIVILEGED = ("actor.model.value_input=privileged_state", "actor.model.privileged_state_dim=43",  # PickCube-v1's, with the clock
              "+env.train.init_params.privileged_state=true")


def test_critic_replay_fits_the_value_head_to_the_last_steps_and_travels_in_checkpoints(actor_hosts, model_dir, tmp_path):
    cfg = actor_config(model_dir, *PRIVILEGED, "algorithm.critic_replay_steps=2")
    batches = [make_rollout_batch(cfg, seed=s) for s in range(4)]
    with ActorGroup(actor_hosts, cfg, 2) as group:
        metrics = [group.call("train_step", b)[0] for b in batches[:3]]
        group.call("save_checkpoint", str(tmp_path / "actor"))
        kept = group.run(lambda w: w.update.value_replay.state_dict())
        last = group.call("train_step", batches[3])[0]
        after = group.call("get_trainable_state_dict")[0][0]
    # this step's batch and at most the 2 before it, 16 samples each
    assert [m["train/critic/replay_samples"] for m in metrics + [last]] == [16.0, 32.0, 48.0, 48.0]
    assert all(math.isfinite(m["train/critic/replay_value_loss"]) for m in metrics)
    assert len(kept[0]) == 3 and all(torch.equal(a[k], b[k]) for a, b in zip(*kept) for k in a)  # both ranks keep the same
    # Resumed on one rank, the kept samples come back and the next step repeats the two-rank one.
    with ActorGroup(actor_hosts, cfg, 1) as group:
        group.call("load_checkpoint", str(tmp_path / "actor"))
        restored = group.run(lambda w: w.update.value_replay.state_dict())[0]
        resumed = group.call("train_step", batches[3])[0]
        after_resumed = group.call("get_trainable_state_dict")[0][0]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(kept[0], restored) for k in a)
    assert resumed["train/critic/replay_value_loss"] == pytest.approx(last["train/critic/replay_value_loss"], rel=1e-4)
    for k, v in after.items():
        torch.testing.assert_close(after_resumed[k], v, rtol=1e-4, atol=1e-6, msg=k)


def test_critic_replay_moves_the_value_head_only(actor_hosts, model_dir):
    plain = actor_config(model_dir, *PRIVILEGED)
    batch = make_rollout_batch(plain)
    _, without, _ = train_once(actor_hosts, plain, 1, batch)
    _, with_replay, metrics = train_once(actor_hosts, actor_config(model_dir, *PRIVILEGED, "algorithm.critic_replay_steps=1"), 1, batch)
    changed = {k for k in without if not torch.equal(without[k], with_replay[k])}
    assert changed and all(k.startswith("value_head.") for k in changed), sorted(changed)[:5]
    assert "train/critic/replay_value_loss" in metrics and "train/critic/replay_value_loss" not in train_once(actor_hosts, plain, 1, batch)[2]
