"""Recording one expert episode through the policy's own env (`ManiSkillSubEnv`).

The observations are produced by the same sub-env class, params and state builder that serve
the policy in RL, so images and state vectors are byte-identical to what the policy sees. The
episode follows the RL episode rules: it ends when the simulator terminates (success) or after
`max_episode_steps`; ManiSkill's own time limit is ignored.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from embodied_rl.demos.experts import make_expert
from embodied_rl.demos.policy_actions import PolicyActionMap
from embodied_rl.demos.spec import DemoSpec
from embodied_rl.errors import ConfigError


@dataclass
class EpisodeRecord:
    """One expert episode of T steps (T + 1 observations).

    main_images / wrist_images: uint8 [T+1, H, W, 3] (wrist None without a wrist camera).
    states: float32 [T+1, D] the policy's state vector.
    policy_actions: float32 [T, A] in the policy's convention (what SFT learns).
    env_actions: float32 [T, A] what the controller received (= adapter(policy_actions)).
    rewards: float32 [T] raw simulator reward; success / terminated / truncated: bool [T].
    env_states: ManiSkill `get_state_dict()` per observation, {"actors"|"articulations": {name: [T+1, S]}}.
    """

    reset_id: int
    main_images: np.ndarray
    wrist_images: np.ndarray | None
    states: np.ndarray
    policy_actions: np.ndarray
    env_actions: np.ndarray
    rewards: np.ndarray
    success: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    env_states: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return int(self.policy_actions.shape[0])

    @property
    def succeeded(self) -> bool:
        return self.length > 0 and bool(self.success[-1])


@dataclass(frozen=True)
class RecorderInfo:
    """Cameras, state layout and `gym.make` kwargs (ManiSkill's `env_info.env_kwargs`) of a recorder."""

    main_camera: str
    wrist_camera: str | None
    state_layout: tuple[str, ...]
    env_kwargs: dict


def _state_dict(task) -> dict[str, dict[str, np.ndarray]]:
    return {kind: {name: v[0].cpu().numpy() for name, v in group.items()} for kind, group in task.get_state_dict().items()}


class DemoRecorder:
    """One simulator and one expert; `record(reset_id, max_steps)` plays an episode and returns it."""

    def __init__(self, spec: DemoSpec) -> None:
        from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv

        warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
        self.spec = spec
        self.sub_env = ManiSkillSubEnv(spec.params, spec.instruction)
        if self.sub_env.action_dim != spec.action_dim:
            self.close()
            raise ConfigError(
                f"actor.model.action_dim={spec.action_dim} but the {spec.params.control_mode} controller of "
                f"{spec.task_id} takes {self.sub_env.action_dim}-d actions"
            )
        self.to_policy = PolicyActionMap(spec.env_cfg.action_adapter, self.sub_env.action_dim)
        self.expert = make_expert(spec.task_id)

    def info(self) -> RecorderInfo:
        """Facts for the dataset's metadata; complete after the first `record`."""
        return RecorderInfo(
            main_camera=self.sub_env.main_cam, wrist_camera=self.sub_env.wrist_cam,
            state_layout=self.sub_env.state_layout, env_kwargs=dict(self.sub_env.env.unwrapped.spec.kwargs),
        )

    def record(self, reset_id: int, max_steps: int) -> EpisodeRecord:
        """Play one expert episode from `reset_id`, at most `max_steps` env steps."""
        sub, task = self.sub_env, self.sub_env.env.unwrapped
        obs = sub.reset(reset_id)
        self.expert.reset()
        frames, sim_states = [obs], [_state_dict(task)]
        policy_actions, env_actions, rewards, success, terminated = [], [], [], [], []
        for _ in range(max_steps):
            policy = self.to_policy(self.expert.act(task))
            ctrl = self.to_policy.adapter(policy)  # exactly what ChunkedVectorEnv sends
            obs, reward, term, succ = sub.step(ctrl)
            frames.append(obs)
            sim_states.append(_state_dict(task))
            policy_actions.append(policy)
            env_actions.append(ctrl)
            rewards.append(reward)
            success.append(succ)
            terminated.append(term)
            if term:
                break
        env_states = {kind: {name: np.stack([s[kind][name] for s in sim_states]) for name in group}
                      for kind, group in sim_states[0].items()}
        truncated = np.zeros(len(terminated), bool)
        truncated[-1] = not terminated[-1]
        return EpisodeRecord(
            reset_id=int(reset_id),
            main_images=np.stack([f["main_image"] for f in frames]),
            wrist_images=np.stack([f["wrist_image"] for f in frames]) if "wrist_image" in frames[0] else None,
            states=np.stack([f["state"] for f in frames]).astype(np.float32),
            policy_actions=np.stack(policy_actions).astype(np.float32),
            env_actions=np.stack(env_actions).astype(np.float32),
            rewards=np.asarray(rewards, np.float32),
            success=np.asarray(success, bool),
            terminated=np.asarray(terminated, bool),
            truncated=truncated,
            env_states=env_states,
        )

    def close(self) -> None:
        self.sub_env.close()
