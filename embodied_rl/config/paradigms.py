"""What each training update (`runner.paradigm`) trains on, for the run plan and the config rules.

The updates themselves live in `workers/actor/updates/` (a layer above the config); the plan
and the rules read only these traits, registered under the same name: the built-ins here, a
plug-in's by `workers.actor.updates.register_update`, which registers its class and its traits
together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embodied_rl.registry import Registry


@dataclass(frozen=True)
class Paradigm:
    #: The runner rolls out env.train before each step and hands the update the batch.
    uses_rollouts: bool = True
    #: The demos of data.train_data_paths are what it trains on (SFT): required, in batches of
    #: actor.global_batch_size. Otherwise they are optional, read only for the algorithm's
    #: behaviour-cloning term (algorithm.bc_coef > 0).
    learns_from_demos: bool = False
    #: It trains the algorithm's critic (adv_type gae / bi_level_gae), so the critic's keys
    #: (runner.critic_warmup, algorithm.bootstrap_type) act.
    trains_critic: bool = True


PARADIGMS: Registry[Paradigm] = Registry("runner.paradigm")
RL = PARADIGMS.register("rl")(Paradigm())
SFT = PARADIGMS.register("sft")(Paradigm(uses_rollouts=False, learns_from_demos=True, trains_critic=False))


def paradigm_of(cfg: Any) -> Paradigm:
    """The traits of the config's runner.paradigm (ConfigError naming the valid names)."""
    return PARADIGMS.get(cfg.runner.paradigm)
