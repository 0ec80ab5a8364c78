"""`runner.paradigm: rl`: PPO / GRPO (with a critic or without, per algorithm.adv_type) on a
step's rollouts, with critic warm-up, the behaviour-cloning term on demos (algorithm.bc_coef)
and the critic's replay of earlier value targets (algorithm.critic_replay_steps)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from embodied_rl.algorithms import compute_actor_critic_loss
from embodied_rl.algorithms.losses import fit_value_loss
from embodied_rl.workers.actor import CRITIC_GROUP
from embodied_rl.workers.actor.batch import Samples, check_batch_sizes, flatten_batch
from embodied_rl.workers.actor.micro_metrics import combine, extreme
from embodied_rl.workers.actor.updates import UPDATES, Update
from embodied_rl.workers.actor.value_replay import ValueReplay

if TYPE_CHECKING:
    from embodied_rl.rollout_batch import RolloutBatch
    from embodied_rl.workers.actor.engine import TrainEngine


@UPDATES.register("rl")  # its traits, config.paradigms.RL, are registered there
class ActorCriticUpdate(Update):
    def __init__(self, cfg: Any, engine: TrainEngine) -> None:
        super().__init__(cfg, engine)
        replay = cfg.algorithm.critic_replay_steps
        self.value_replay = ValueReplay(replay) if replay else None

    def step(self, batch: RolloutBatch | None) -> dict[str, float]:
        """`algorithm.update_epoch` passes over the batch, one optimizer step per global
        minibatch (plus the BC term on demos when they are loaded, after critic warm-up), then
        (with algorithm.critic_replay_steps) the critic's replay pass, then one LR-scheduler step."""
        e, algo, a = self.engine, self.cfg.algorithm, self.cfg.actor
        e.onload()
        flat = flatten_batch(batch, needs_critic=algo.uses_critic)
        e.policy.observe_training_batch(flat.forward_inputs)
        total = len(flat)
        check_batch_sizes(total, a.global_batch_size, a.micro_batch_size, e.world_size)
        # Metrics stay tensors on the device until the step ends: one host sync for all of them.
        sums: dict[str, torch.Tensor] = {}
        bc_sums: dict[str, torch.Tensor] = {}  # the BC term's metrics, summed over optimizer steps
        n_micro = n_steps = skipped = 0
        grad_norm_sum = 0.0
        lrs = e.lrs()  # the LR this training step uses
        # The scheduler counts finished training steps (restored on resume).
        warmup = e.scheduler.last_epoch < self.cfg.runner.critic_warmup
        bc = self.demos is not None and not warmup
        for _ in range(algo.update_epoch):
            for micro_indices in e.minibatches(total):
                for i, idx in enumerate(micro_indices):
                    # The BC term's micro-batches follow: then its last backward syncs instead.
                    sync = i == len(micro_indices) - 1 and not bc
                    metrics = self._backward_micro(flat.select(idx), scale=1.0 / len(micro_indices), sync=sync)
                    for k, v in metrics.items():
                        sums[k] = combine(k, sums.get(k), v.double())
                    n_micro += 1
                if bc:
                    for k, v in self.demos.backward(coef=algo.bc_coef).items():
                        bc_sums[k] = bc_sums.get(k, 0.0) + v
                norm = e.clip_and_step(critic_only=warmup)
                n_steps += 1
                skipped += not math.isfinite(norm)
                grad_norm_sum += norm if math.isfinite(norm) else 0.0
        replay = self._replay_values(flat) if self.value_replay is not None else {}
        e.finish_step()
        out = {f"train/{k}": v if extreme(k) else v / n_micro for k, v in sums.items()}
        out.update({f"train/actor/bc_{k.split('/')[-1]}": v / n_steps for k, v in bc_sums.items()})
        out = e.reduce_over_ranks({**out, **replay})
        out["train/actor/grad_norm"] = grad_norm_sum / max(1, n_steps - skipped)
        out["train/actor/nonfinite_grad_steps"] = float(skipped)
        out["train/actor/optimizer_steps"] = float(n_steps)
        for name, lr in lrs.items():
            out["train/critic/lr" if name == CRITIC_GROUP else "train/actor/lr"] = 0.0 if warmup and name != CRITIC_GROUP else lr
        out["train/critic/warmup"] = float(warmup)
        return out

    def _backward_micro(self, mb: Samples, scale: float, sync: bool) -> dict[str, torch.Tensor]:
        e, algo = self.engine, self.cfg.algorithm
        mb = mb.map(e.to_device)
        critic = algo.uses_critic
        out = e.policy.evaluate_actions(mb.forward_inputs, mb.action_record, temperature=algo.sampling_params.temperature_train,
                                        compute_values=critic)
        loss, metrics = compute_actor_critic_loss(
            algo,
            logprobs=out["logprobs"].float(), old_logprobs=mb.logprobs, advantages=mb.advantages,
            loss_mask=mb.loss_mask, entropy=_float(out.get("entropy")),
            values=_float(out.get("values")) if critic else None,
            old_values=mb.values, returns=mb.returns, value_mask=mb.value_mask,
            ref_logprobs=mb.ref_logprobs, action_dim=self.cfg.actor.model.action_dim,
        )
        e.backward(loss * scale, sync)
        return metrics

    def _replay_values(self, flat: Samples) -> dict[str, float]:
        """One value-only pass over the critic's samples of this step and the kept earlier ones,
        in global minibatches of the step's size (the same plan on every rank)."""
        e, algo = self.engine, self.cfg.algorithm
        self.value_replay.add(flat)
        data = self.value_replay.samples()
        loss_sum, n_micro = torch.zeros((), dtype=torch.float64, device=e.device), 0
        for micro_indices in e.minibatches(len(data["returns"])):
            for i, idx in enumerate(micro_indices):
                mb = e.to_device({k: v[idx] for k, v in data.items()})
                loss = fit_value_loss(e.policy.state_values(mb["privileged"]), mb["returns"], mb["value_mask"].bool(), algo.huber_delta)
                e.backward(algo.value_loss_coef * loss / len(micro_indices), sync=i == len(micro_indices) - 1)
                loss_sum, n_micro = loss_sum + loss.detach().double(), n_micro + 1
            e.clip_and_step(critic_only=True)
        return {"train/critic/replay_value_loss": float(loss_sum) / max(1, n_micro), "train/critic/replay_samples": float(len(data["returns"]))}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "value_replay": self.value_replay.state_dict() if self.value_replay else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.value_replay is not None:
            self.value_replay.load_state_dict(state.get("value_replay") or [])


def _float(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.float()
