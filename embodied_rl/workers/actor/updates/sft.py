"""`runner.paradigm: sft`: one optimizer step of behaviour cloning on the demos per training step."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from embodied_rl.config.paradigms import SFT
from embodied_rl.workers.actor import CRITIC_GROUP
from embodied_rl.workers.actor.updates import UPDATES, Update

if TYPE_CHECKING:
    from embodied_rl.rollout_batch import RolloutBatch


@UPDATES.register("sft")  # its traits, config.paradigms.SFT, are registered there
class SFTUpdate(Update):
    paradigm = SFT
    adopts_demo_statistics = True
    done_note = "SFT done; start RL from it with `embodied-rl export {checkpoint} DIR` and actor.model.model_path=DIR"

    def step(self, batch: RolloutBatch | None = None) -> dict[str, float]:
        """One optimizer step on `actor.global_batch_size` demo samples (this rank: its slice),
        then one LR-scheduler step."""
        if self.demos is None:
            raise RuntimeError("ActorWorker.load_demos(stats) must run before an SFT step")
        e = self.engine
        e.onload()
        lr = next(v for k, v in e.lrs().items() if k != CRITIC_GROUP)
        sums = self.demos.backward(coef=1.0)
        norm = e.clip_and_step()
        e.finish_step()
        out = e.reduce_over_ranks({f"train/{k}": v for k, v in sums.items()})
        out["train/actor/grad_norm"] = norm if math.isfinite(norm) else float("nan")
        out["train/actor/lr"] = lr
        out["train/sft/epoch"] = float(self.demos.sampler.epoch)
        return out
