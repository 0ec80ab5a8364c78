"""Schema of `env.train` / `env.eval`: one env config from env_configs/ plus overrides, or a
mixture of several (`tasks`), each with its share of the sub-envs.

Key names follow RLinf's embodied layout. Simulator-specific `init_params` are validated
against the backend's own dataclass (`SimulatorBackend.params_cls`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class VideoConfig:
    save_video: bool = field(default=False, metadata={"help": "Record mp4 videos of the rollouts (sub-envs tiled in a grid)."})
    info_on_video: bool = field(default=True, metadata={"help": "Overlay step, reward, success and instruction on each tile."})
    video_base_dir: str = field(default="${runner.logger.log_path}/video/train", metadata={"help": "Videos go to <dir>/step_<global_step:06d>/worker<w>_stage<s>.mp4, each with a JSON sidecar (.json) listing its episodes."})
    fps: int = field(default=20, metadata={"help": "Frame rate of the written videos."})


@dataclass
class GripperConfig:
    index: int = field(default=-1, metadata={"help": "Index of the gripper dimension in the action vector."})
    convention: str = field(default="none", metadata={"help": "How the policy's gripper value maps to the controller: none | binarize | flip_binarize (OFT->LIBERO: -sign(2a-1))."})
    threshold: float = field(default=0.5, metadata={"help": "Threshold for `binarize`: 2*(a>threshold)-1."})


@dataclass
class ActionAdapterConfig:
    scale: list[float] = field(default_factory=lambda: [1.0], metadata={"help": "Per-dimension (or one shared) multiplier from policy actions to controller units."})
    offset: list[float] = field(default_factory=lambda: [0.0], metadata={"help": "Per-dimension (or one shared) offset added after scaling."})
    clip: list[float] | None = field(default=None, metadata={"help": "[low, high] clip of the controller action; null = no clip."})
    gripper: GripperConfig = field(default_factory=GripperConfig)


@dataclass
class SubprocConfig:
    """Deadlines of simulators that run one process per sub-env (ManiSkill CPU sim, LIBERO)."""

    start_timeout_s: float = field(default=300.0, metadata={"help": "Seconds a sub-env process may take to build its simulator."})
    reset_timeout_s: float = field(default=120.0, metadata={"help": "Seconds a reset may take before the sub-env is declared hung, killed and restarted."})
    step_timeout_s: float = field(default=60.0, metadata={"help": "Seconds a step may take before the sub-env is declared hung, killed and restarted (its episode fails)."})
    max_restarts: int = field(default=3, metadata={"help": "Consecutive failed rebuilds of one sub-env before the rollout is aborted."})
    start_method: str = field(default="forkserver", metadata={"help": "multiprocessing start method of sub-env processes: forkserver | spawn."})


@dataclass
class ServerConfig:
    """Where the simulator runs when not in the env worker's own interpreter (docs/ENVIRONMENTS.md)."""

    python: str | None = field(default=None, metadata={"help": "Python interpreter of the simulator's own virtual environment (e.g. /opt/libero-venv/bin/python): each env worker stage starts an env server with it (python -m embodied_rl.envs.service) and restarts it when it dies or hangs (env.subproc deadlines and max_restarts). Exclusive with address."})
    address: str | None = field(default=None, metadata={"help": "HOST:PORT of an env server started by hand (embodied-rl env-server --listen HOST:PORT), e.g. on another host; both sides need the same EMBODIED_RL_ENV_SERVER_KEY. Exclusive with python."})


@dataclass
class EnvConfig:
    env_type: str = field(default="???", metadata={"help": "Simulator backend: maniskill | libero."})
    total_num_envs: int | None = field(default=None, metadata={"help": "Sub-envs over all env workers; a multiple of env processes x rollout.pipeline_stage_num x group_size. null = derived from the machine at start: groups_per_stage groups per stage of every env worker (env processes x stages x groups_per_stage x group_size)."})
    groups_per_stage: int = field(default=1, metadata={"help": "With total_num_envs null: groups of group_size sub-envs that every env worker steps per pipeline stage, so a recipe's episodes per update grow with the machine instead of being fixed to one size. Must be 1 when total_num_envs is set."})
    auto_reset: bool = field(default=False, metadata={"help": "Reset a sub-env right after its episode ends, also inside a chunk (the rest of the chunk then runs in the new episode); the terminal observation is returned as final_obs for bootstrapping. Off: the sub-env stays done (not stepped, zero reward, active_mask false) until the next rollout epoch."})
    ignore_terminations: bool = field(default=False, metadata={"help": "Ignore the simulator's terminations (success): every episode runs to max_episode_steps; success_once/success_at_end are still reported. A crashed sub-env still ends its episode (as a failure)."})
    use_fixed_reset_state_ids: bool = field(default=False, metadata={"help": "true: every rollout epoch (train) or evaluation (eval) starts from the same reset states (LIBERO eval: spread evenly over all tasks' init states); false: fresh states each time. Ids are reproducible either way: drawn from (seed, env worker/stage offset, rollout epoch (fixed: 0), group, episode)."})
    reset_id_split: Literal["train", "eval", "all"] = field(default="train", metadata={"help": "Which initial states (reset ids) this section draws from: train and eval never share one, so evaluation is held out by construction (ManiSkill: seeds [0, 2^30) train, [2^30, 2^31-1) eval; LIBERO: init states 0-39 of each task train, 40-49 eval). Default train for env.train, eval for env.eval. all = every state, e.g. LIBERO's official protocol (all 50 per task): allowed for env.eval only, where it states that the evaluation includes training states."})
    group_size: int = field(default=1, metadata={"help": "Consecutive sub-envs per group; a group's members always start from the same reset state (GRPO compares them). Must divide each env worker stage's sub-envs; env.train.group_size must equal algorithm.group_size."})
    seed: int = field(default=0, metadata={"help": "Seed of the reset-id stream (combined with the env worker/stage offset) and of the simulators."})
    max_episode_steps: int = field(default=50, metadata={"help": "Env steps after which an episode is truncated (the simulator's own time limit is ignored)."})
    use_rel_reward: bool = field(default=False, metadata={"help": "Pay r_t - r_(t-1) within an episode (after reward_coef), so a held success is paid once."})
    reward_coef: float = field(default=1.0, metadata={"help": "Multiplier of the simulator reward."})
    task_description: str = field(default="", metadata={"help": "Instruction given to the policy (ManiSkill tasks carry none)."})
    video_cfg: VideoConfig = field(default_factory=VideoConfig)
    subproc: SubprocConfig = field(default_factory=SubprocConfig)
    action_adapter: ActionAdapterConfig = field(default_factory=ActionAdapterConfig)
    init_params: dict[str, Any] = field(default_factory=dict, metadata={"help": "Simulator-specific parameters, validated against the backend's schema (see docs/CONFIG.md)."})
    server: ServerConfig | None = field(default=None, metadata={"help": "Run the simulator in an env server, a separate process with its own interpreter (server.python) or one started by hand (server.address), speaking a small versioned protocol (docs/ENVIRONMENTS.md). null = in the env worker's process (its sub-env pool), the default."})
    tasks: list[MixtureTask] = field(default_factory=list, metadata={"help": "A mixture: several tasks (each an env config with its share of the sub-envs) stepped side by side in one rollout, one policy acting in all; empty = the single env config of this section. Each entry: config (an env config name in env_configs/ or a YAML path), share (weight; default 1), train_size / test_size (the first N initial states of the split the section draws from; null = all), and any of env_type, max_episode_steps, use_rel_reward, reward_coef, task_description, action_adapter, init_params, server for that task alone. The section's own keys apply to every task; its rollout-shaping keys (total_num_envs, groups_per_stage, group_size, auto_reset, ignore_terminations, use_fixed_reset_state_ids, reset_id_split, seed, video_cfg, subproc) only there. Metrics, evaluation intervals and videos are broken down per task (docs/ENVIRONMENTS.md)."})

    def task_configs(self, key: str) -> list[tuple[str, EnvConfig]]:
        """(config path, env config) of every task this section runs: itself, or its mixture's tasks."""
        if not self.tasks:
            return [(key, self)]
        return [(f"{key}.tasks[{i}]", t) for i, t in enumerate(self.tasks)]


#: Keys that one section sets for all its tasks: they shape the rollout (sub-env counts, groups,
#: episode starts and ends, videos, reset-id streams), which every task of a stage shares.
SECTION_KEYS = ("total_num_envs", "groups_per_stage", "auto_reset", "ignore_terminations", "use_fixed_reset_state_ids",
                "reset_id_split", "group_size", "seed", "video_cfg", "subproc")
#: Keys a mixture task may set for itself (in its env config or inline).
TASK_KEYS = ("env_type", "max_episode_steps", "use_rel_reward", "reward_coef", "task_description", "action_adapter", "init_params",
             "server")


@dataclass
class MixtureTask(EnvConfig):
    """One task of a mixture: an env config (by name or path, plus inline keys) and its share."""

    config: str | None = field(default=None, metadata={"help": "Env config this task starts from: a name in env_configs/ or a path to a YAML file; its keys come first, then the section's, then this entry's own. null = the entry's inline keys alone (env_type and init_params at least)."})
    share: float = field(default=1.0, metadata={"help": "Weight of this task: its sub-env groups are share / sum of shares of the section's groups (largest-remainder rounding, within one group at any machine size; at least one group each)."})
    train_size: int | None = field(default=None, metadata={"help": "Distinct initial states this task draws from in the train split (its first train_size reset ids, as VAGEN's train_size); null = all. Only in a section that draws from the train split."})
    test_size: int | None = field(default=None, metadata={"help": "Distinct initial states this task draws from in the eval split (its first test_size reset ids, as VAGEN's test_size); null = all. Only in a section that draws from the eval split."})

    def size(self) -> int | None:
        """How many of its split's initial states this task draws from (None = all)."""
        return self.train_size if self.reset_id_split == "train" else self.test_size
