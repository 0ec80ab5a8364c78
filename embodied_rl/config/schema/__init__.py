"""The root of the typed config schema; each section lives in its own module.

`algorithm` (schema/algorithm.py), `actor.model` (schema/model.py) and `env.train|eval`
(schema/env.py) are owned by their subsystems; the runtime sections are in schema/runtime.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from embodied_rl.config.schema.algorithm import AlgorithmConfig
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.config.schema.model import ModelConfig
from embodied_rl.config.schema.runtime import (
    ActorConfig,
    ClusterConfig,
    DataConfig,
    EnvGroupConfig,
    RolloutConfig,
    RunnerConfig,
)


@dataclass
class RootConfig:
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    env: EnvGroupConfig = field(default_factory=EnvGroupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    data: DataConfig = field(default_factory=DataConfig)
    plugins: list[str] = field(default_factory=list, metadata={"help": "Python modules to import before the config is checked and in every worker process, whose import registers the run's own policies, simulators, advantage estimators, updates or metric sinks (embodied_rl/plugins.py); installed packages can instead declare an entry point in the group embodied_rl.plugins."})


__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "ClusterConfig",
    "DataConfig",
    "EnvConfig",
    "EnvGroupConfig",
    "ModelConfig",
    "RolloutConfig",
    "RootConfig",
    "RunnerConfig",
]
