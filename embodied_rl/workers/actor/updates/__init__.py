"""Training updates keyed by `runner.paradigm`: what one training step of the actor computes.

An update is a class built as `cls(cfg, engine)` on every actor rank after the engine's set-up
(workers/actor/engine.py: the sharded policy, optimizer, gradient sync, collectives). It says
what it trains on (`paradigm`: rollouts of env.train handed to it by the runner, or demos it
holds, and whether it trains the critic) and implements `step`. Adding one is a module here (or
in a plug-in) with a class registered by `register_update`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from embodied_rl.config.paradigms import PARADIGMS, RL, Paradigm
from embodied_rl.registry import Registry

if TYPE_CHECKING:
    from embodied_rl.rollout_batch import RolloutBatch
    from embodied_rl.workers.actor.demos import DemoFeed
    from embodied_rl.workers.actor.engine import TrainEngine


class Update:
    #: What it trains on (rollouts, demos, a critic): read by the plan and the config rules,
    #: which look the traits up by name in config.paradigms.PARADIGMS (register_update).
    paradigm: ClassVar[Paradigm] = RL
    #: The policy adopts the demos' normalisation statistics (SFT); otherwise demos are binned
    #: with the policy's own (RL's BC term).
    adopts_demo_statistics: ClassVar[bool] = False
    #: What the run's log says when training ends, with {checkpoint} filled in; None = nothing.
    done_note: ClassVar[str | None] = None

    def __init__(self, cfg: Any, engine: TrainEngine) -> None:
        self.cfg, self.engine = cfg, engine
        self.demos: DemoFeed | None = None

    def load_demos(self, stats: dict | None) -> int:
        """Read data.train_data_paths on this rank (see DemoFeed); returns the sample count."""
        from embodied_rl.workers.actor.demos import DemoFeed

        self.demos = DemoFeed.load(self.engine, stats)
        return len(self.demos)

    def step(self, batch: RolloutBatch | None) -> dict[str, float]:
        """One training step (rollout-based updates: on `batch`, a rollout batch with its targets
        set by compute_advantages; others: None); metrics reduced over ranks."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the update besides weights and optimizer."""
        return {"sft_sampler": self.demos.state_dict() if self.demos is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.demos is not None and state.get("sft_sampler") is not None:
            self.demos.load_state_dict(state["sft_sampler"])


UPDATES: Registry[type[Update]] = Registry("runner.paradigm")


def register_update(name: str) -> Callable[[type[Update]], type[Update]]:
    """Register an Update class under `name` (runner.paradigm) with its traits (cls.paradigm)."""
    def deco(cls: type[Update]) -> type[Update]:
        PARADIGMS.register(name)(cls.paradigm)
        return UPDATES.register(name)(cls)

    return deco


from embodied_rl.workers.actor.updates import actor_critic, sft  # noqa: F401  (register the built-ins)

__all__ = ["UPDATES", "Update"]
