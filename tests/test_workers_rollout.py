"""Env + rollout workers on real ManiSkill (64 px) with the real tiny OFT model, over Ray.

1 env worker x 2 sub-envs x 2 pipeline stages + 1 rollout worker, 2 chunk steps: the
trajectory has the documented shapes, eval mode keeps none, weight versions are enforced, the
eval scorings act greedily or sample (seeded) on the same initial states, and the training
stream restores from a checkpointed state.
"""
from __future__ import annotations

import dataclasses
import io

import pytest
import ray
import torch

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.worker_group import RayCluster, WorkerError, WorkerGroup
from embodied_rl.envs.maniskill import ManiSkillParams
from embodied_rl.envs.reset_split import EVAL_SEEDS_START
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.workers.env_worker import EnvWorker
from embodied_rl.workers.protocol import (
    ChannelWiring,
    SamplingSpec,
    Trajectory,
    trajectory_key,
)
from embodied_rl.workers.rollout_worker import RolloutWorker

pytestmark = [pytest.mark.maniskill, pytest.mark.slow]

T, N, STAGES, C, A = 2, 2, 2, 8, 7


def env_cfg(**kw) -> EnvConfig:
    params = ManiSkillParams(id="PickCube-v1", camera_heights=64, camera_widths=64, reward_mode="dense")
    base = {"env_type": "maniskill", "task_description": "pick up the red cube", "seed": 3, "total_num_envs": N,
                "max_episode_steps": C * T, "auto_reset": True, "init_params": dataclasses.asdict(params)}
    base.update(kw)
    return EnvConfig(**base)


@pytest.fixture(scope="module")
def model_cfg(tiny_model) -> OpenVLAOFTConfig:
    return OpenVLAOFTConfig(model_path=str(tiny_model(image_size=64)), add_value_head=True, value_type="action_level")


@pytest.fixture(scope="module")
def workers(ray_session, model_cfg):
    cluster = RayCluster(num_cpu_slots=2)
    placement = cluster.placement({"env": "0", "rollout": "1"})
    # One channel per direction, as the runner builds them from env/rollout/actor.channel.
    wiring = ChannelWiring(obs=Channel.create("env_test", queue_size=2), actions=Channel.create("rollout_test", queue_size=1),
                           trajectories=Channel.create("actor_test", queue_size=0), obs_queue="obs", action_queue="act",
                           trajectory_queue="replay")
    envs = WorkerGroup(EnvWorker, cluster, placement, "env", kwargs={
        "env_cfgs": {"train": env_cfg(), "eval": env_cfg(auto_reset=False, ignore_terminations=True, reset_id_split="eval")},
        "wiring": wiring, "num_rollout_workers": 1, "pipeline_stage_num": STAGES})
    rollouts = WorkerGroup(RolloutWorker, cluster, placement, "rollout", kwargs={
        "model_cfg": model_cfg, "wiring": wiring, "num_env_workers": 1, "pipeline_stage_num": STAGES,
        "sampling": {"train": SamplingSpec(), "greedy": SamplingSpec(do_sample=False), "sampled": SamplingSpec(),
                     "cold": SamplingSpec(temperature=1e-6)}, "compute_values": True,
        "compute_ref_logprobs": True})
    yield envs, rollouts, wiring
    envs.close().wait()
    envs.shutdown()
    rollouts.shutdown()
    for ch in (wiring.obs, wiring.actions, wiring.trajectories):
        assert ch.shutdown() == 0 or ch is wiring.trajectories  # producers unlinked their segments
    cluster.shutdown()


def run_epoch(envs, rollouts, mode="train", send=False, scoring="greedy", eval_epoch=0, **kw):
    env_refs = envs.interact(T, mode, **kw)
    out_refs = rollouts.generate(T, mode, send=send, scoring=scoring, eval_epoch=eval_epoch)
    return env_refs.wait(300)[0], out_refs.wait(300)[0]


def test_rollout_trajectory_has_documented_shapes(workers):
    envs, rollouts, wiring = workers
    key = trajectory_key("replay", 0)
    wiring.trajectories.register_consumer(key)  # the trajectory comes back through shared memory
    env_metrics, (returned, roll_metrics) = run_epoch(envs, rollouts, send=True)
    traj = wiring.trajectories.get(key)
    assert returned is None and isinstance(traj, Trajectory) and traj.version == 0
    batch = traj.batch
    assert isinstance(batch, RolloutBatch) and traj.num_envs == N
    # The OFT policy's action record: its sampled tokens (relative bins), one per log-prob entry.
    assert batch.action_record.shape == (T, N, C * A) and batch.action_record.dtype == torch.int64
    assert batch.logprobs.shape == (T, N, C * A) and torch.isfinite(batch.logprobs).all()
    assert (batch.logprobs <= 0).all()
    # Before any weight sync the policy is the reference checkpoint: the KL reference agrees.
    assert batch.ref_logprobs.shape == batch.logprobs.shape and torch.equal(batch.ref_logprobs, batch.logprobs)
    for name in ("rewards", "truncations", "dones"):
        assert getattr(batch, name).shape == (T, N, C), name
    assert batch.rewards.dtype == torch.float32 and batch.dones.dtype == torch.bool
    assert batch.values.shape == (T, N, C) and torch.isfinite(batch.values).all()
    assert batch.last_values.shape == (N, C) and torch.isfinite(batch.last_values).all()
    assert batch.bootstrap_values.shape == (T, N)
    # Episodes are C*T steps long: every sub-env is truncated at the last step of the last chunk.
    assert batch.truncations[-1, :, -1].all() and not batch.truncations[0].any()
    assert (batch.bootstrap_values[-1] != 0).all() and (batch.bootstrap_values[0] == 0).all()
    # One forward after the last chunk serves both: every row reset, so its last value is V(final obs).
    assert torch.equal(batch.last_values[:, 0], batch.bootstrap_values[-1])
    for key, value in batch.forward_inputs.items():
        assert value.shape[:2] == (T, N), key
    assert env_metrics["env/num_trajectories"] == N
    assert env_metrics["time/env/step_s"] > 0 and roll_metrics["time/rollout/infer_s"] > 0
    with_last = batch.values_with_bootstrap()
    assert with_last.shape == (T + 1, N, C) and torch.equal(with_last[-1], batch.last_values)
    assert batch.advantages is None and batch.loss_mask is None  # targets: compute_advantages sets them


def test_eval_mode_fixed_reset_ids_keeps_no_trajectory(workers):
    envs, rollouts, _ = workers
    envs.release("train").wait()  # at most 2 simulator processes at a time on the test box
    assert envs.get_state().wait() == [{"train": [0, 0]}]  # one train epoch per stage, kept on release
    envs.set_state({"train": [4, 4]}).wait()
    assert envs.get_state().wait() == [{"train": [4, 4]}]
    env_metrics, (traj, _) = run_epoch(envs, rollouts, "eval", reset_ids=[EVAL_SEEDS_START + 5, EVAL_SEEDS_START + 7])
    assert traj is None and env_metrics["env/num_trajectories"] == N  # truncated at T*C steps
    assert envs.get_state().wait() == [{"train": [4, 4], "eval": [0, 0]}]


def test_eval_scorings_share_states_and_sampling_is_seeded(workers):
    """Greedy, then sampled on the same states (repeat_states): the sampled actions differ (the
    dense returns do), are the same again for the same eval epoch (seeded per epoch, not by the
    training stream) and differ for another; at a vanishing temperature sampling is argmax."""
    envs, rollouts, _ = workers
    envs.release("train").wait()
    train_rng = rollouts.get_rng_state().wait()[0]

    def scored(scoring: str, epoch: int = 0, repeat: bool = True):
        metrics, _ = run_epoch(envs, rollouts, "eval", scoring=scoring, eval_epoch=epoch, repeat_states=repeat,
                               reset_ids=[EVAL_SEEDS_START + 11, EVAL_SEEDS_START + 13])
        (episodes,) = envs.last_episodes().wait()
        return metrics, episodes

    greedy, greedy_eps = scored("greedy", repeat=False)
    sampled, sampled_eps = scored("sampled")
    again, again_eps = scored("sampled")
    other, _ = scored("sampled", epoch=1)
    _, cold_eps = scored("cold")
    # One episode per sub-env, run-wide sub-env index, the same initial states for every scoring.
    assert [(e.sub_env, e.episode) for e in greedy_eps] == [(i, 0) for i in range(N)]  # 1 sub-env per stage
    starts = [e.reset_id for e in greedy_eps]
    assert starts == [EVAL_SEEDS_START + 11, EVAL_SEEDS_START + 13]
    assert [e.reset_id for e in sampled_eps] == [e.reset_id for e in cold_eps] == starts
    assert sampled["env/return"] != greedy["env/return"]
    assert again_eps == sampled_eps and again["env/return"] == sampled["env/return"]
    assert other["env/return"] != sampled["env/return"]
    assert [e.episode_return for e in cold_eps] == [e.episode_return for e in greedy_eps]
    assert _equal_states(rollouts.get_rng_state().wait()[0], train_rng)  # evaluations never draw from the training stream
    with pytest.raises(WorkerError, match="no sampling spec 'bogus'"):
        rollouts.generate(1, "eval", scoring="bogus").wait()


def test_weight_versions_must_increase(workers, model_cfg):
    rollouts = workers[1]
    from embodied_rl.distributed.weight_sync import make_buckets
    from embodied_rl.models import build_policy

    sd = build_policy(model_cfg).trainable_state_dict()
    assert rollouts.update_weights(sd, 1).wait() == [1]
    with pytest.raises(WorkerError, match="stale or duplicate"):
        rollouts.update_weights(sd, 1).wait()
    # What the runner passes: references to buckets, which the workers fetch one at a time.
    refs = [ray.put(b) for b in make_buckets(sd.items(), bucket_bytes=2**16)]
    assert len(refs) > 1 and rollouts.update_weights(refs, 2).wait() == [2]
    with pytest.raises(WorkerError, match="never arrived"):
        rollouts.update_weights(refs[1:], 3).wait()


def test_worker_error_names_group_and_rank(workers):
    envs = workers[0]
    with pytest.raises(WorkerError, match="^EnvWorker rank 0 failed: ValueError: EnvWorker has no 'bogus' env config"):
        envs.interact(1, "bogus").wait()


def _equal_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_stream_restores_from_a_checkpointed_state(workers):
    """As the runner saves and resumes: get_rng_state -> torch.save -> weights-only load ->
    set_rng_state. From the same env epochs the worker then draws the same tokens again, and
    its stream ends where it did. The state names the CPU stream only: the logits are on the CPU."""
    envs, rollouts, _ = workers
    envs.release("eval").wait()  # at most 2 simulator processes at a time on the test box
    buf = io.BytesIO()
    torch.save(rollouts.get_rng_state().wait(), buf)
    saved = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert list(saved[0]) == ["cpu"]
    env_state = envs.get_state().wait()
    _, (first, _) = run_epoch(envs, rollouts)
    after_first = rollouts.get_rng_state().wait()
    assert not _equal_states(after_first[0], saved[0])  # the epoch sampled from the stream
    rollouts.set_rng_state.each([(s,) for s in saved]).wait()
    envs.set_state.each([(s,) for s in env_state]).wait()
    _, (again, _) = run_epoch(envs, rollouts)
    assert torch.equal(again.batch.action_record, first.batch.action_record)
    assert _equal_states(rollouts.get_rng_state().wait()[0], after_first[0])


def test_trajectory_orders_envs_by_env_rank_then_stage():
    # 2 env workers x 2 stages x 3 sub-envs served by one rollout worker: per stage the rollout
    # sees [env0 rows, env1 rows]; the trajectory must list (env, stage, sub-env) in order.
    from types import SimpleNamespace

    k, stages, n, steps = 2, 2, 3, 2
    me = SimpleNamespace(env_ranks=[0, 1], stages=stages, compute_values=True, version=7, kl_reference=None)
    rec = []
    for s in range(stages):
        ids = torch.tensor([e * stages * n + s * n + i for e in range(k) for i in range(n)], dtype=torch.float32)
        step = {key: [ids.clone() for _ in range(steps)] for key in
                ("action_record", "logprobs", "rewards", "truncations", "dones",
                 "values", "bootstrap_values")}
        step["last_values"] = [ids.clone()]
        step["forward_inputs"] = [{"pixel_values": ids.clone()} for _ in range(steps)]
        rec.append(step)
    traj = RolloutWorker._build(me, rec)
    expected = torch.arange(k * stages * n, dtype=torch.float32)
    b = traj.batch
    assert torch.equal(b.action_record[0], expected) and torch.equal(b.values[-1], expected)
    assert torch.equal(b.last_values, expected)
    assert torch.equal(b.forward_inputs["pixel_values"][1], expected) and traj.version == 7
