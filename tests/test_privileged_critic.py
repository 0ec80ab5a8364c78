"""The asymmetric critic: ManiSkill's privileged state and the episode clock reach the value
head (`actor.model.value_input: privileged_state`), and nothing of it reaches the policy."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.configure import load_config
from embodied_rl.envs import ChunkedVectorEnv
from embodied_rl.envs.maniskill import ManiSkillBackend, ManiSkillParams
from embodied_rl.envs.maniskill.spec import PANDA_PRIVILEGED_DIMS, maniskill_env_spec
from embodied_rl.envs.reset_split import seed_split
from embodied_rl.errors import ConfigError
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.types import EnvObservation
from tests.observations import observations

PUSH = ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64, reward_mode="normalized_dense")
PUSH_STATE_DIM = 35  # qpos 9 + qvel 9 + tcp_pose 7 + goal_pos 3 + obj_pose 7


@pytest.mark.maniskill
def test_the_privileged_sizes_the_config_checks_use_are_maniskills_own():
    """The config check of actor.model.privileged_state_dim reads a table (no simulator before
    start): each entry is the size of the task's `state` observation as ManiSkill builds it."""
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the tasks)

    for task, dim in PANDA_PRIVILEGED_DIMS.items():
        env = gym.make(task, obs_mode="state", num_envs=1)
        try:
            assert env.observation_space.shape[-1] == dim, task
        finally:
            env.close()


def vector_env(params: ManiSkillParams, **kw) -> ChunkedVectorEnv:
    cfg = EnvConfig(env_type="maniskill", task_description="push the cube", seed=0,
                    init_params=dataclasses.asdict(params), **kw)
    return ChunkedVectorEnv(ManiSkillBackend(cfg, params, 1, seed=0), cfg, reset_id_space=seed_split("train"))


@pytest.mark.maniskill
def test_privileged_state_and_clock_reach_the_observation_and_the_policy_inputs_do_not_change():
    plain = vector_env(PUSH, max_episode_steps=6, auto_reset=True)
    priv = vector_env(dataclasses.replace(PUSH, privileged_state=True), max_episode_steps=6, auto_reset=True)
    try:
        for env in (plain, priv):
            env.set_reset_ids([7])
        a, b = plain.reset(), priv.reset()
        assert a.privileged_states is None
        assert b.privileged_states.shape == (1, PUSH_STATE_DIM + 1) and b.privileged_states.dtype == np.float32
        assert maniskill_env_spec(dataclasses.replace(PUSH, privileged_state=True)).privileged_state_dim == PUSH_STATE_DIM + 1
        assert b.privileged_states[0, -1] == 0.0  # the clock at the first step
        # what the policy sees is the same with and without the privileged state
        np.testing.assert_array_equal(a.main_images, b.main_images)
        np.testing.assert_array_equal(a.states, b.states)
        # the tcp pose sits in both: the policy's state [tcp pose, fingers] and the privileged extras
        np.testing.assert_allclose(b.privileged_states[0, 18:25], b.states[0, :7], atol=1e-6)
        chunk = np.zeros((1, 4, 7), np.float32)
        chunk[..., 0] = 0.5
        first = priv.chunk_step(chunk)
        np.testing.assert_allclose(first.obs.privileged_states[0, -1], 4 / 6)
        np.testing.assert_array_equal(plain.chunk_step(chunk).obs.main_images, first.obs.main_images)
        # the episode ends at its 6th step inside the next chunk: the final observation carries the
        # clock at the end (1.0), the new episode's first one starts again at 0
        second = priv.chunk_step(chunk)
        assert second.truncations[0, 1] and second.final_obs is not None
        np.testing.assert_allclose(second.final_obs.privileged_states[0, -1], 1.0)
        assert second.obs.privileged_states[0, -1] == 0.0
        assert not np.array_equal(second.final_obs.privileged_states[0, :-1], second.obs.privileged_states[0, :-1])
    finally:
        plain.close()
        priv.close()


@pytest.fixture(scope="module")
def ckpt(tiny_model) -> str:
    return str(tiny_model())


def obs(n: int = 3, seed: int = 0, dim: int = 6) -> EnvObservation:
    return observations(n, size=64, seed=seed, instructions=["push the cube"], privileged_dim=dim)


def critic_policy(ckpt: str, **kw):
    cfg = OpenVLAOFTConfig(model_path=ckpt, num_action_chunks=2, add_value_head=True, value_type="chunk_level",
                           value_input="privileged_state", privileged_state_dim=6, **kw)
    return build_policy(cfg, warn_untrained_value_head=False)


def test_the_asymmetric_critic_reads_the_privileged_state_only(ckpt):
    policy = critic_policy(ckpt)
    x, other_images, other_state = obs(seed=0), obs(seed=1), obs(seed=0)
    other_images.privileged_states = x.privileged_states.copy()
    other_state.privileged_states = other_state.privileged_states + 1.0
    values = lambda o: policy.predict(policy.prepare_inputs(o), do_sample=False).values
    with torch.no_grad():
        base = values(x)
        assert base.shape == (3, 1)
        torch.testing.assert_close(values(other_images), base)  # images differ, privileged state the same
        assert not torch.allclose(values(other_state), base)
    # its loss moves the value head only: the policy's weights get no gradient from the critic
    inputs = policy.prepare_inputs(x)
    out = policy.evaluate_actions(inputs, policy.predict(inputs, do_sample=False).action_record)
    out["values"].sum().backward()
    assert policy.value_head.mlp[0].weight.grad is not None and policy.value_head.mlp[0].weight.shape[1] == 6
    assert all(p.grad is None or not p.grad.any() for n, p in policy.named_parameters() if not n.startswith("value_head"))


def test_a_privileged_state_of_another_size_or_none_is_a_one_line_error(ckpt):
    policy = critic_policy(ckpt)
    with pytest.raises(ConfigError, match=r"actor.model.privileged_state_dim=6 but the env's privileged state has 9 values; set it to 9"):
        policy.prepare_inputs(obs(dim=9))
    bare = obs()
    bare.privileged_states = None
    with pytest.raises(ConfigError, match="set env.train.init_params.privileged_state=true"):
        policy.predict(policy.prepare_inputs(bare), do_sample=False)


PPO_PUSH = ["env.train=maniskill_push_cube", "env.eval=maniskill_push_cube"]
PRIV = ["actor.model.value_input=privileged_state", "actor.model.privileged_state_dim=36"]


@pytest.mark.parametrize("name,overrides,message", [
    ("maniskill_ppo_tiny", PRIV, "set env.train.init_params.privileged_state=true"),
    ("maniskill_ppo_tiny", ["+env.train.init_params.privileged_state=true"], "env.train.init_params.privileged_state=true but nothing reads it"),
    ("maniskill_ppo_tiny", [*PRIV, "+env.train.init_params.privileged_state=true", "+env.eval.init_params.privileged_state=true"],
     "env.eval.init_params.privileged_state=true but nothing reads it"),
    ("maniskill_ppo_tiny", ["actor.model.privileged_state_dim=36"], "actor.model.privileged_state_dim: is set but value_input=hidden"),
    ("maniskill_ppo_tiny", ["actor.model.value_input=privileged"], "actor.model.value_input: got 'privileged'"),
    ("maniskill_ppo_tiny", ["actor.model.value_input=privileged_state"], "actor.model.privileged_state_dim: value_input=privileged_state needs"),
    ("maniskill_grpo_tiny", PRIV, "configures a critic this run does not train"),
    ("maniskill_ppo_tiny", ["algorithm.critic_replay_steps=2"], "algorithm.critic_replay_steps=2 replays the privileged critic's inputs"),
    ("maniskill_ppo_tiny", ["algorithm.critic_replay_steps=-1"], "algorithm.critic_replay_steps=-1 must be >= 0"),
    ("maniskill_grpo_tiny", ["algorithm.critic_replay_steps=2"], "adv_type=grpo has no critic; set it to 0"),
    ("libero_grpo_tiny", [*PRIV, "algorithm.adv_type=gae", "algorithm.group_size=1", "actor.model.add_value_head=true",
                          "actor.model.value_type=chunk_level"], "has no privileged state; use actor.model.value_input=hidden"),
])
def test_privileged_state_keys_that_nothing_reads_or_that_cannot_work_are_rejected(name, overrides, message):
    extra = PPO_PUSH if name == "maniskill_ppo_tiny" else []
    with pytest.raises(ConfigError, match=message) as err:
        load_config(name, [*extra, *overrides], plan=False)
    assert "\n" not in str(err.value)


def test_the_privileged_critic_config_is_accepted():
    cfg = load_config("maniskill_ppo_tiny", [*PPO_PUSH, *PRIV, "+env.train.init_params.privileged_state=true"], plan=False)
    assert cfg.actor.model.value_input == "privileged_state" and cfg.env.train.init_params["privileged_state"] is True


def _grads(norm_policy: float, norm_critic: float) -> list[dict]:
    policy, critic = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(3))
    policy.grad = torch.full((4,), norm_policy / 2.0)  # |(x, x, x, x)| = 2x
    critic.grad = torch.zeros(3)
    critic.grad[0] = norm_critic
    return [{"name": "policy", "params": [policy]}, {"name": "value_head", "params": [critic]}]


def test_an_asymmetric_critics_gradient_is_clipped_apart_from_the_policys():
    from embodied_rl.workers.actor.optim import clip_gradients, clip_sets

    together = _grads(0.5, 30.0)
    norms = clip_gradients(clip_sets(together, critic_apart=False), clip=1.0)
    assert norms == pytest.approx([(0.5 ** 2 + 30.0 ** 2) ** 0.5])
    assert together[0]["params"][0].grad.norm() == pytest.approx(0.5 / norms[0], rel=1e-4)  # the critic shrank the policy's step
    apart = _grads(0.5, 30.0)
    assert clip_gradients(clip_sets(apart, critic_apart=True), clip=1.0) == pytest.approx([0.5, 30.0])
    assert apart[0]["params"][0].grad.norm() == pytest.approx(0.5)  # under the limit: untouched
    assert apart[1]["params"][0].grad.norm() == pytest.approx(1.0, rel=1e-4)
    # during the critic warm-up only the value head has a gradient
    apart[0]["params"][0].grad = None
    assert clip_gradients(clip_sets(apart, critic_apart=True), clip=1.0) == pytest.approx([1.0], rel=1e-4)


def test_the_critics_input_statistics_follow_the_training_batches_and_travel_with_the_weights(ckpt):
    from embodied_rl.models.openvla_oft.heads import InputNormalizer

    norm = InputNormalizer(3)
    x = torch.tensor([[1.0, 100.0, -5.0]]) + torch.randn(4000, 3) * torch.tensor([0.01, 10.0, 2.0])
    torch.testing.assert_close(norm(x[:2]), x[:2].clamp(-10, 10))  # no statistics yet: the identity (clipped)
    for part in x.split(700):  # batch by batch equals all at once
        norm.update(part)
    torch.testing.assert_close(norm.mean, x.mean(0))
    torch.testing.assert_close(norm.var, x.var(0, unbiased=False))
    z = norm(x)
    torch.testing.assert_close(z.mean(0), torch.zeros(3), atol=1e-4, rtol=0)
    torch.testing.assert_close(z.std(0), torch.ones(3), atol=1e-3, rtol=0)

    policy = critic_policy(ckpt)
    batch = obs(n=5, seed=3)
    inputs = policy.prepare_inputs(batch)
    policy.observe_training_batch({"privileged": inputs["privileged"] * 50.0})
    stats = {k: v for k, v in policy.trainable_state_dict().items() if "input_norm" in k}
    assert set(stats) == {"value_head.input_norm.mean", "value_head.input_norm.var", "value_head.input_norm.count"}
    assert float(stats["value_head.input_norm.count"]) == 5.0
    rollout = critic_policy(ckpt)  # a rollout worker's copy: the same values once it has the weights
    rollout.load_trainable_state_dict(policy.trainable_state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rollout.predict(inputs, do_sample=False).values, policy.predict(inputs, do_sample=False).values)
