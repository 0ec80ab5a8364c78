"""DemoFeed: the demonstrations an update trains on by behaviour cloning (SFT, or RL's BC term).

Every rank reads and tokenises the demos of data.train_data_paths itself, so no sample passes
through the driver; each global batch is drawn by an epoch sampler (checkpointed) and each rank
trains on its slice of it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from embodied_rl.algorithms.sft import sft_loss

if TYPE_CHECKING:
    from embodied_rl.demos.sft_data import SFTSamples
    from embodied_rl.workers.actor.engine import TrainEngine


class DemoFeed:
    def __init__(self, engine: TrainEngine, samples: SFTSamples) -> None:
        from embodied_rl.demos.sft_data import EpochSampler

        self.engine, self.samples = engine, samples
        self.sampler = EpochSampler(len(samples), engine.shuffle)

    @classmethod
    def load(cls, engine: TrainEngine, stats: dict | None = None) -> DemoFeed:
        """The demos of data.train_data_paths, recorded by the engine's policy. `stats`: the
        statistics the policy adopts first (SFT's); None keeps the policy's own, so the expert's
        actions are normalised and recorded as the policy being fine-tuned records its own."""
        from embodied_rl.demos.sft_data import build_samples, load_sft_demos

        engine.require_setup()
        if stats is not None:
            engine.policy.set_dataset_statistics(stats)
        return cls(engine, build_samples(engine.policy, load_sft_demos(engine.cfg)))

    def __len__(self) -> int:
        return len(self.samples)

    def backward(self, coef: float) -> dict[str, torch.Tensor]:
        """Accumulate coef x the behaviour-cloning loss of the next global batch of demo samples
        (this rank's slice; its last backward syncs the gradients); returns its metrics
        (sft/nll, sft/expert_prob) as float64 device tensors."""
        e = self.engine
        batch = self.sampler.next(e.cfg.actor.global_batch_size)
        noise = None
        if (std := e.cfg.data.action_noise_std) > 0:
            # drawn for the whole global batch from the sampler's generator: every rank draws the
            # same noise and it resumes with the sampler's checkpointed state
            noise = std * torch.randn(len(batch), self.samples.action_width, generator=self.sampler.generator)
        micros = e.rank_micro_batches(torch.arange(len(batch)))
        sums: dict[str, torch.Tensor] = {}
        for i, pos in enumerate(micros):
            inputs, record, mask = self.samples.select(batch[pos], None if noise is None else noise[pos])
            out = e.policy.evaluate_actions(e.to_device(inputs), record.to(e.device), temperature=1.0,
                                            compute_values=False, scoring="likelihood")
            loss, metrics = sft_loss(out["logprobs"].float(), mask.to(e.device))
            e.backward(coef * loss / len(micros), sync=i == len(micros) - 1)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v.double() / len(micros)
        return sums

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
