"""Schema of the `algorithm` section (implemented in embodied_rl/algorithms).

Key names follow RLinf's YAML (seed 002) where the concept exists; reward processing and
loss aggregation follow ROLL (seed 004); `high_level_gamma` follows VAGEN (seed 003).
Every key changes the advantages, the loss or its gradient (tests/test_algorithms_keys.py
proves it key by key) or is consumed by the runtime/rollout (listed in RUNTIME_KEYS).
Contradictory or ineffective combinations are rejected by `validate()` rather than ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from embodied_rl.errors import ConfigError

GRANULARITIES = ("token_level", "action_level", "chunk_level")
REWARD_NORMS = ("none", "batch", "group", "running")
BOOTSTRAP_TYPES = ("standard", "none")
#: How an evaluation picks actions: greedy = the policy's most likely action, sampled = drawn at temperature_eval.
EVAL_SCORINGS = ("greedy", "sampled")
EvalScoring = Literal["greedy", "sampled"]


@dataclass
class SamplingParams:
    do_sample: bool = field(default=True, metadata={"help": "Sample actions during training rollouts (false = the most likely action; log-probs are still reported)."})
    temperature_train: float = field(default=1.0, metadata={"help": "Softmax temperature of training rollouts and of the training forward pass."})
    eval_scoring: list[EvalScoring] = field(default_factory=lambda: ["greedy", "sampled"], metadata={"help": "How every evaluation (and embodied-rl eval, and each side of eval --compare) scores the policy, each scoring on the same initial states: greedy (the most likely action, the usual protocol for reported success rates) and/or sampled (actions drawn at temperature_eval with the policy's own sampling settings, as RL rollouts act; seeded per eval epoch, reproducible). Each is logged as eval/<scoring>/... with its intervals; the first, the primary, also as eval/... . Each scoring is one more pass over the eval episodes."})
    temperature_eval: float = field(default=1.0, metadata={"help": "Softmax temperature of the sampled evaluation scoring (eval_scoring: sampled)."})


@dataclass
class AlgorithmConfig:
    # --- advantages ---------------------------------------------------------------------
    adv_type: str = field(default="gae", metadata={"help": "Advantage estimator: gae | grpo | bi_level_gae | reinforce_pp."})
    reward_type: str = field(default="chunk_level", metadata={"help": "Reward/value granularity of gae and reinforce_pp (and of reward_norm statistics): action_level (one reward and value per env step) | chunk_level (chunk reward = sum of its step rewards, one value per chunk). bi_level_gae needs chunk_level."})
    gamma: float = field(default=0.99, metadata={"help": "Discount per reward step (per env step at action_level, per chunk at chunk_level; per log-prob entry inside a chunk for bi_level_gae)."})
    gae_lambda: float = field(default=0.95, metadata={"help": "GAE lambda (gae, both levels of bi_level_gae)."})
    high_level_gamma: float = field(default=0.95, metadata={"help": "bi_level_gae: discount across chunks of the chunk-level GAE."})
    group_size: int = field(default=1, metadata={"help": "grpo and group_baseline: envs per group sharing a reset state (envs n, m grouped iff n // group_size == m // group_size); also the grouping of reward_norm: group. Must equal env.group_size."})
    norm_adv_by_std_in_grpo: bool = field(default=True, metadata={"help": "grpo: divide (score - group mean) by the group std; group_baseline: divide each group's centred advantages at a step by their std. false = mean-centering only."})
    group_baseline: bool = field(default=False, metadata={"help": "gae: subtract from each env's advantage at each step the mean advantage at that step of the other envs of its group (group_size envs from one reset state). The critic keeps crediting actions within an episode; the group removes how easy the shared start was, which a critic fitted on a few episodes per update does not learn (docs/LEARNING.md). With norm_adv_by_std_in_grpo (the default) each group's advantages at a step are also divided by their std, as GRPO's returns are. Needs group_size >= 2."})
    drop_uniform_groups: bool = field(default=False, metadata={"help": "grpo dynamic sampling: mask out groups whose episode returns are all equal (zero advantage, no signal)."})
    normalize_advantages: bool = field(default=True, metadata={"help": "Whiten advantages over the valid log-prob entries of the batch (masked mean 0, std 1). reinforce_pp always whitens."})
    bootstrap_type: str = field(default="standard", metadata={"help": "What a time-limit truncation adds to the episode's last reward, for a critic (gae, bi_level_gae): standard (gamma * V(final_obs): the limit only cuts an episode that would go on) | none (the limit is part of the task, as when success counts within max_episode_steps: value targets are the return inside the episode). With standard on a fixed-horizon task every episode ends truncated, so the value targets feed on the critic's own values and grow step after step."})
    advantage_clip: float | None = field(default=None, metadata={"help": "Clamp advantages to [-x, x] after normalisation; null = no clamp."})
    # --- reward processing (ROLL), applied in this order: norm, clip, KL shaping ----------
    reward_norm: str = field(default="none", metadata={"help": "Normalise rewards before the estimator: none | batch | group (per GRPO group) | running (running statistics kept by the runtime and checkpointed)."})
    reward_scale: bool = field(default=False, metadata={"help": "With reward_norm: only divide by the std (do not subtract the mean)."})
    reward_shift: bool = field(default=False, metadata={"help": "With reward_norm: only subtract the mean (do not divide by the std)."})
    reward_clip: float | None = field(default=None, metadata={"help": "Clamp (normalised) rewards to [-x, x]; null = no clamp."})
    kl_beta: float = field(default=0.0, metadata={"help": "KL-to-reference reward shaping: each env step's reward -= kl_beta * KL of its action (needs ref log-probs)."})
    kl_penalty: str = field(default="kl", metadata={"help": "KL estimator of the sampled actions for kl_beta shaping and the KL loss: kl | abs | mse | low_var_kl."})
    # --- policy loss ---------------------------------------------------------------------
    logprob_type: str = field(default="token_level", metadata={"help": "Importance-ratio granularity: token_level (one ratio per log-prob entry of the policy) | action_level (sum the entries' log-probs per action) | chunk_level (sum over the chunk)."})
    entropy_type: str = field(default="token_level", metadata={"help": "Entropy granularity for entropy_bonus: token_level | action_level (sum of its entries' entropies) | chunk_level."})
    ratio_clip_eps: float = field(default=0.2, metadata={"help": "Symmetric PPO clip: ratio in [1-eps, 1+eps]; clip_ratio_low/high override each side when set."})
    clip_ratio_low: float | None = field(default=None, metadata={"help": "Lower PPO clip (ratio >= 1 - low); null = ratio_clip_eps."})
    clip_ratio_high: float | None = field(default=None, metadata={"help": "Upper PPO clip (ratio <= 1 + high); null = ratio_clip_eps."})
    clip_ratio_c: float | None = field(default=None, metadata={"help": "Dual-clip bound (> 1): for negative advantages the loss is capped at -A * c; null = off."})
    loss_agg_func: str = field(default="token-mean", metadata={"help": "Aggregation of per-entry losses (a sequence = one chunk): token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm."})
    entropy_bonus: float = field(default=0.0, metadata={"help": "Coefficient of the entropy bonus subtracted from the loss."})
    use_kl_loss: bool = field(default=False, metadata={"help": "Add kl_loss_coef * KL(policy || reference) to the loss (needs ref log-probs)."})
    kl_loss_coef: float = field(default=0.001, metadata={"help": "Coefficient of the KL loss term (with use_kl_loss)."})
    early_stop_imp_ratio: float | None = field(default=None, metadata={"help": "Skip a micro-batch (zero loss, actor/skipped=1) if any valid importance ratio exceeds this; null = never."})
    # --- value loss ----------------------------------------------------------------------
    value_loss_coef: float = field(default=1.0, metadata={"help": "Coefficient of the value loss (gae, bi_level_gae)."})
    value_clip: float | None = field(default=0.2, metadata={"help": "Clip new values to old_values +- x and take the larger loss (PPO value clipping); null = off."})
    huber_delta: float | None = field(default=None, metadata={"help": "Huber loss with this delta for the value loss; null = 0.5 * squared error."})
    critic_replay_steps: int = field(default=0, metadata={"help": "After each training step's updates, one value-only pass over the critic's samples (privileged state, return) of this step and the N steps before it, which the actor keeps and checkpoints: more data per fit when a batch holds few episodes (docs/LEARNING.md measures it); 0 = fit the current batch only. Needs actor.model.value_input=privileged_state."})
    # --- demonstrations during RL ----------------------------------------------------------
    bc_coef: float = field(default=0.0, metadata={"help": "Demo-augmented RL (as DAPG): every policy optimizer step also takes bc_coef x the behaviour-cloning loss (mean negative log-likelihood of the expert's actions, SFT's loss) on actor.global_batch_size samples of the demonstrations in data.train_data_paths, drawn epoch after epoch; not during runner.critic_warmup. The demos pull the policy towards the expert's actions where its own rollouts rarely succeed; 0 = off (data.train_data_paths must then be empty)."})
    # --- consumed by the runtime / rollout (see RUNTIME_KEYS) ----------------------------
    update_epoch: int = field(default=1, metadata={"help": "Passes over the rollout batch per training step."})
    n_minibatches: int = field(default=1, metadata={"help": "With actor.global_batch_size null: optimizer steps per update epoch, the rollout batch split evenly (global_batch_size = rollout batch / n_minibatches, derived at start). Must be 1 when actor.global_batch_size is set."})
    rollout_epoch: int = field(default=1, metadata={"help": "Rollout epochs collected per training step (concatenated along the env axis)."})
    eval_rollout_epoch: int = field(default=1, metadata={"help": "Rollout epochs per evaluation, each starting fresh episodes on every env.eval sub-env: an evaluation has env.eval.total_num_envs x eval_rollout_epoch episodes (with use_fixed_reset_state_ids, epoch k of every evaluation starts from the same states). Videos record the first."})
    sampling_params: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        self.validate()

    # Properties resolve the documented ratio_clip_eps shorthand in one place.
    @property
    def clip_low(self) -> float:
        return self.ratio_clip_eps if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def clip_high(self) -> float:
        return self.ratio_clip_eps if self.clip_ratio_high is None else self.clip_ratio_high

    @property
    def uses_critic(self) -> bool:
        return self.adv_type in ("gae", "bi_level_gae")

    def validate(self) -> None:
        """Raise ConfigError (one line, naming the key) for invalid or ineffective settings."""
        # adv_type, kl_penalty and loss_agg_func name registry entries: algorithms/checks.py.
        _choice("reward_type", self.reward_type, GRANULARITIES[1:])
        _choice("logprob_type", self.logprob_type, GRANULARITIES)
        _choice("entropy_type", self.entropy_type, GRANULARITIES)
        _choice("reward_norm", self.reward_norm, REWARD_NORMS)
        _choice("bootstrap_type", self.bootstrap_type, BOOTSTRAP_TYPES)
        for key in ("gamma", "gae_lambda", "high_level_gamma"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"algorithm.{key}={getattr(self, key)} must be in [0, 1]")
        for key in ("ratio_clip_eps", "clip_ratio_low", "clip_ratio_high", "advantage_clip", "reward_clip",
                    "value_clip", "huber_delta", "kl_beta", "kl_loss_coef", "entropy_bonus", "value_loss_coef", "bc_coef"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"algorithm.{key}={value} must be >= 0")
        if self.clip_low >= 1.0:
            raise ConfigError(f"algorithm.clip_ratio_low (or ratio_clip_eps)={self.clip_low} must be < 1 (ratio lower bound 1 - low > 0)")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ConfigError(f"algorithm.clip_ratio_c={self.clip_ratio_c} must be > 1 (or null to disable dual-clip)")
        if self.early_stop_imp_ratio is not None and self.early_stop_imp_ratio <= 1.0:
            raise ConfigError(f"algorithm.early_stop_imp_ratio={self.early_stop_imp_ratio} must be > 1 (or null)")
        if self.group_size < 1:
            raise ConfigError(f"algorithm.group_size={self.group_size} must be >= 1")
        if self.adv_type == "grpo" and self.group_size < 2:
            raise ConfigError("algorithm.adv_type=grpo needs algorithm.group_size >= 2 (a group baseline needs several envs)")
        if self.group_baseline and self.adv_type != "gae":
            raise ConfigError(f"algorithm.group_baseline=true corrects GAE advantages, but adv_type={self.adv_type}; set adv_type: gae or group_baseline: false")
        if self.group_baseline and self.group_size < 2:
            raise ConfigError("algorithm.group_baseline=true needs algorithm.group_size >= 2 (and env.train.group_size equal to it): envs from one reset state to compare")
        if self.adv_type == "bi_level_gae" and self.reward_type != "chunk_level":
            raise ConfigError("algorithm.adv_type=bi_level_gae credits whole chunks; set algorithm.reward_type: chunk_level")
        if self.reward_norm == "none" and (self.reward_scale or self.reward_shift):
            raise ConfigError("algorithm.reward_scale/reward_shift only modify a reward_norm; set algorithm.reward_norm (batch|group|running) or set them false")
        if self.reward_scale and self.reward_shift:
            raise ConfigError("algorithm.reward_scale and reward_shift are exclusive (both = no normalisation); set at most one")
        if self.reward_norm == "group" and self.group_size < 2:
            raise ConfigError("algorithm.reward_norm=group needs algorithm.group_size >= 2")
        if self.critic_replay_steps < 0:
            raise ConfigError(f"algorithm.critic_replay_steps={self.critic_replay_steps} must be >= 0 (0 = no replay)")
        if self.critic_replay_steps and not self.uses_critic:
            raise ConfigError(f"algorithm.critic_replay_steps={self.critic_replay_steps} replays value targets, but adv_type={self.adv_type} has no critic; set it to 0")
        if min(self.update_epoch, self.rollout_epoch, self.eval_rollout_epoch) < 1:
            raise ConfigError("algorithm.update_epoch, rollout_epoch and eval_rollout_epoch must be >= 1")
        if self.sampling_params.temperature_train <= 0 or self.sampling_params.temperature_eval <= 0:
            raise ConfigError("algorithm.sampling_params.temperature_train/temperature_eval must be > 0")
        scoring = list(self.sampling_params.eval_scoring)
        if not scoring:
            raise ConfigError(f"algorithm.sampling_params.eval_scoring is empty; list at least one of: {', '.join(EVAL_SCORINGS)}")
        for s in scoring:
            if s not in EVAL_SCORINGS:
                raise ConfigError(f"algorithm.sampling_params.eval_scoring: {s!r} is not a scoring; choose from: {', '.join(EVAL_SCORINGS)}")
        if len(set(scoring)) != len(scoring):
            raise ConfigError(f"algorithm.sampling_params.eval_scoring=[{', '.join(scoring)}] repeats a scoring; list each at most once")


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"algorithm.{key}={value!r} is not valid; choose one of: {', '.join(valid)}")


#: Keys not used by embodied_rl.algorithms, with who consumes them (checked by the key tests).
RUNTIME_KEYS: dict[str, str] = {
    "update_epoch": "runtime actor loop: passes over the batch per training step",
    "n_minibatches": "config plan: derives actor.global_batch_size from the rollout batch",
    "rollout_epoch": "runtime rollout loop: rollout epochs per training step",
    "eval_rollout_epoch": "runtime evaluation: rollout epochs per evaluation",
    "sampling_params": "rollout/model: action sampling (do_sample, temperatures); runtime evaluation: eval_scoring",
    "critic_replay_steps": "actor: value-only pass over the value targets of the last steps",
    "bc_coef": "actor: behaviour-cloning term on demonstration samples in every policy optimizer step",
}


def algorithm_keys() -> list[str]:
    return [f.name for f in fields(AlgorithmConfig)]
