"""Schema of `runner.health`: the monitors a training run applies to every step's metrics, their
thresholds and what each does when it fires (embodied_rl/health/)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Action = Literal["ignore", "warn", "stop", "rollback"]
_ACTION = ("ignore: not checked; warn: a console line, a health/ metric and an entry in health.jsonl "
           "(the review page shows it); stop: warn, save a resumable checkpoint and end the run with "
           "exit code 1; rollback: warn, go back to the last checkpoint before the failure began and "
           "continue with the learning rates times runner.health.rollback_lr_factor (needs "
           "runner.save_interval), at most runner.health.max_rollbacks times, then stop.")


@dataclass
class NonfiniteConfig:
    action: Action = field(default="stop", metadata={"help": _ACTION})


_FACTOR = "Fires when the metric exceeds factor x its running level (the median of its last runner.health.history values) and the floor."
_FLOOR = "The metric must also exceed this absolute value (a spike from a near-zero level is noise); before 3 values are known, the floor alone decides; 0 = no floor."


@dataclass
class KlSpikeConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    factor: float = field(default=10.0, metadata={"help": _FACTOR})
    floor: float = field(default=1.0, metadata={"help": _FLOOR})


@dataclass
class ClipSpikeConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    factor: float = field(default=5.0, metadata={"help": _FACTOR})
    floor: float = field(default=0.3, metadata={"help": _FLOOR})


@dataclass
class GradSpikeConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    factor: float = field(default=20.0, metadata={"help": _FACTOR})
    floor: float = field(default=0.0, metadata={"help": _FLOOR})


@dataclass
class EntropyCollapseConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    fraction: float = field(default=0.25, metadata={"help": "Fires when train/actor/entropy falls below this fraction of its mean over the first runner.health.history policy updates."})


@dataclass
class CriticCollapseConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    floor: float = field(default=0.0, metadata={"help": "Fires when train/critic/explained_variance, averaged over the last `span` steps, is at or below this value."})
    span: int = field(default=3, metadata={"help": "Steps averaged."})
    grace: int = field(default=2, metadata={"help": "Training steps the critic has before it is checked (a fresh value head starts near 0; the recipe's explains 0.12-0.21 of the return at step 1)."})


@dataclass
class SuccessDropConfig:
    action: Action = field(default="warn", metadata={"help": _ACTION})
    window: int = field(default=5, metadata={"help": "Training steps whose env/success_once is averaged (a step's 64 episodes alone are noisy)."})
    fraction: float = field(default=0.5, metadata={"help": "Fires when the latest window's mean falls below this fraction of the best window's mean so far."})
    min_best: float = field(default=0.1, metadata={"help": "Checked only once the best window's mean success reached this value."})


@dataclass
class DeadStartConfig:
    action: Literal["ignore", "warn", "stop"] = field(default="warn", metadata={"help": "ignore | warn | stop (nothing to roll back to). Fires once, with what usually helps."})
    steps: int = field(default=5, metadata={"help": "Fires when the first this many training steps earned no reward and no success (env/return and env/success_once both 0)."})


@dataclass
class HealthConfig:
    history: int = field(default=10, metadata={"help": "Steps whose median is a metric's running level (spike monitors) and policy updates whose mean entropy is the reference (entropy_collapse); spikes are checked once 3 values are known."})
    nonfinite: NonfiniteConfig = field(default_factory=NonfiniteConfig, metadata={"help": "A non-finite loss or gradient norm, or an optimizer step the actor skipped for a non-finite gradient."})
    kl_spike: KlSpikeConfig = field(default_factory=KlSpikeConfig, metadata={"help": "train/actor/approx_kl far above its running level: an update that moved the policy much more than the ones before."})
    clip_spike: ClipSpikeConfig = field(default_factory=ClipSpikeConfig, metadata={"help": "train/actor/clip_fraction far above its running level."})
    grad_spike: GradSpikeConfig = field(default_factory=GradSpikeConfig, metadata={"help": "train/actor/grad_norm (before clipping) far above its running level."})
    entropy_collapse: EntropyCollapseConfig = field(default_factory=EntropyCollapseConfig)
    critic_collapse: CriticCollapseConfig = field(default_factory=CriticCollapseConfig)
    success_drop: SuccessDropConfig = field(default_factory=SuccessDropConfig)
    dead_start: DeadStartConfig = field(default_factory=DeadStartConfig)
    max_rollbacks: int = field(default=2, metadata={"help": "Rollbacks per run; an alarm whose action is rollback stops the run after that many."})
    rollback_lr_factor: float = field(default=0.5, metadata={"help": "Each rollback multiplies the policy's and the value head's learning rates by this factor, in (0, 1]."})
