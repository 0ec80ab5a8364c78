"""RolloutWorker (Ray actor): batched policy inference with the policy `rollout.backend` serves
(models/rollout_backends.py; the worker does not know which engine runs behind it).

It serves `num_env_workers / num_rollout_workers` consecutive env workers: per chunk step and
pipeline stage it gathers their observations (one message each), runs `prepare_inputs` +
`predict` once under `torch.no_grad`, sends each env worker its actions, and accumulates the
trajectory (see `Trajectory` in workers/protocol.py), which `generate` returns to the runner.

Evaluation epochs act with one of the eval sampling specs (a scoring: "greedy" or "sampled");
a sampled one draws from a generator seeded by (seed, rank, eval epoch) at the start of the
epoch, so every evaluation of the same weights on the same states draws the same actions, and
evaluations never consume the training stream (`get_rng_state`). Both are DeviceGenerators
(models/generators.py): a draw uses the generator on the device of the logits, which is the
worker's device for the huggingface backend and the CPU for vllm.

`enable_offload` moves the model to CPU between rollouts; it needs a GPU (on CPU the model is
already in host memory, so the config checks reject the key rather than let it be ignored).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import ray
import torch

from embodied_rl.config.schema.model import ModelConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.placement import rollout_rank_of
from embodied_rl.distributed.weight_sync import received_buckets
from embodied_rl.models.generators import DeviceGenerators
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.timing import Timer
from embodied_rl.types import EnvObservation
from embodied_rl.workers.protocol import (
    ActionMessage,
    ChannelWiring,
    EnvStepMessage,
    SamplingSpec,
    Trajectory,
    action_key,
    obs_key,
    trajectory_key,
)


class RolloutWorker:
    def __init__(
        self,
        model_cfg: ModelConfig,
        wiring: ChannelWiring | Channel,
        *,
        rank: int,
        world_size: int,
        num_env_workers: int,
        pipeline_stage_num: int,
        sampling: dict[str, SamplingSpec],
        compute_values: bool,
        enable_offload: bool = False,
        seed: int = 0,
        compute_ref_logprobs: bool = False,
        backend: str = "huggingface",
        gpu_memory_utilization: float | None = None,
    ):
        from embodied_rl.models.reference import build_kl_reference
        from embodied_rl.models.rollout_backends import build_rollout_policy

        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model_cfg, self.seed, self.backend = model_cfg, seed, backend
        self.gpu_memory_utilization = gpu_memory_utilization
        self.rank, self.wiring, self.stages = rank, ChannelWiring.of(wiring), pipeline_stage_num
        wiring = self.wiring
        self.env_ranks = [e for e in range(num_env_workers) if rollout_rank_of(e, num_env_workers, world_size) == rank]
        self.sampling, self.compute_values, self.enable_offload = sampling, compute_values, enable_offload
        # Same init_seed on every rollout worker: weights the checkpoint lacks agree across workers.
        self.policy = build_rollout_policy(backend, model_cfg, device=self.device, init_seed=seed,
                                           gpu_memory_utilization=gpu_memory_utilization)
        # The KL reference is the policy as loaded, built before any weight sync (which it never follows).
        self.kl_reference = build_kl_reference(self.policy, model_cfg, self.device, init_seed=seed) if compute_ref_logprobs else None
        self.version = 0
        self.generators = DeviceGenerators(seed * 1000 + rank)
        for s in range(self.stages):
            wiring.obs.register_consumer(obs_key(wiring.obs_queue, rank, s))  # before env workers send: shared memory
        if enable_offload:
            self.offload()

    def set_dataset_statistics(self, stats: dict) -> None:
        """Act with these normalisation statistics (SFT's) from now on."""
        self.policy.set_dataset_statistics(stats)

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def generate(self, n_chunk_steps: int, mode: str = "train", *, send: bool = False, store: bool = False,
                 scoring: str = "greedy", eval_epoch: int = 0) -> tuple[Trajectory | list | None, dict[str, float]]:
        """Serve one rollout epoch of T chunk steps: (Trajectory, time/rollout/* metrics).

        store: put the trajectory in this node's object store and return [its reference]
        instead (in a list, so the caller passes the reference on without fetching the data).
        send: put the trajectory on the trajectories channel under
        `trajectory_key(wiring.trajectory_queue, rank)` (shared memory on one host, for the
        actor side to `get`) and return None in its place.
        mode "eval" keeps no trajectory (returns None) and acts with the sampling spec named
        `scoring`; a sampling one draws from eval_generators(eval_epoch)."""
        if mode not in ("train", "eval"):
            raise ValueError(f"RolloutWorker: unknown mode {mode!r}; valid: train, eval")
        name = "train" if mode == "train" else scoring
        if name not in self.sampling:
            raise ValueError(f"RolloutWorker: no sampling spec {name!r} for mode {mode!r}; have {sorted(self.sampling)}")
        if self.enable_offload:
            self.onload()
        spec, keep = self.sampling[name], mode == "train"
        generator = self.generators if keep else self.eval_generators(eval_epoch)
        rec: list[dict[str, list]] = [defaultdict(list) for _ in range(self.stages)]
        timer = Timer("infer", "wait_obs")
        for t in range(n_chunk_steps + 1):
            for s in range(self.stages):
                with timer("wait_obs"):
                    msgs = self._receive(s, t)
                with timer("infer"):
                    self._act(rec[s], msgs, s, t, n_chunk_steps, spec, keep, generator)
        if self.enable_offload:
            self.offload()
        metrics = {**timer.metrics("time/rollout/"), **self.wiring.actions.take_counts("actions")}
        if not keep:
            return None, metrics
        traj = self._build(rec)
        if store:
            return [ray.put(traj)], metrics
        if not send:
            return traj, metrics
        if self.wiring.trajectories is None:
            raise ValueError("generate(send=True) needs ChannelWiring.trajectories (the actor channel)")
        self.wiring.trajectories.put(traj, trajectory_key(self.wiring.trajectory_queue, self.rank))
        return None, metrics

    def _act(self, rec: dict, msgs: list[EnvStepMessage], s: int, t: int, n_chunk_steps: int, spec: SamplingSpec,
             keep: bool, generator: DeviceGenerators) -> None:
        """Record the outcome of chunk step t - 1 of stage s, then answer its observation with
        actions (or, after the last chunk step, compute the values GAE bootstraps from)."""
        final_values = self._record_outcome(rec, msgs) if t > 0 and keep else None
        obs = EnvObservation.concat([m.obs for m in msgs])
        if t < n_chunk_steps:
            inputs = self._inputs(obs)
            out = self.policy.predict(inputs, do_sample=spec.do_sample, temperature=spec.temperature,
                                      compute_values=self.compute_values and keep, generator=generator)
            self._send_actions(s, t, out.actions.float().cpu().numpy(), [m.obs.num_envs for m in msgs])
            if keep:
                self._record_step(rec, out, msgs)
                if self.kl_reference is not None:
                    ref = self.kl_reference.logprobs(inputs, out.action_record, temperature=spec.temperature)
                    rec["ref_logprobs"].append(ref.float().cpu())
        elif keep and self.compute_values:
            # V(final obs) equals V(obs) on rows that did not reset, and rows that did are done
            # at the last step, where GAE ignores the next value: one forward serves both.
            rec["last_values"].append(final_values if final_values is not None else self._values(obs))

    def _receive(self, stage: int, step: int) -> list[EnvStepMessage]:
        # Zero-copy: everything kept from a message is copied out (np.concatenate, prepare_inputs),
        # and its segment returns to the env worker when the message is dropped.
        key = obs_key(self.wiring.obs_queue, self.rank, stage)
        msgs = [self.wiring.obs.get(key, copy=False) for _ in self.env_ranks]
        msgs.sort(key=lambda m: m.env_rank)
        if [m.env_rank for m in msgs] != self.env_ranks or any(m.step != step for m in msgs):
            got = [(m.env_rank, m.step) for m in msgs]
            raise RuntimeError(f"rollout worker {self.rank} stage {stage}: expected step {step} from env workers {self.env_ranks}, got {got}")
        return msgs

    def _inputs(self, obs: EnvObservation) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in self.policy.prepare_inputs(obs).items()}

    def _values(self, obs: EnvObservation) -> torch.Tensor:
        out = self.policy.predict(self._inputs(obs), do_sample=False, compute_values=True)
        if out.values is None:
            raise ValueError("compute_values needs a policy with a value head (the config checks require add_value_head for critics)")
        return out.values.float().cpu()

    def _send_actions(self, stage: int, step: int, actions: np.ndarray, sizes: list[int]) -> None:
        start = 0
        for env_rank, n in zip(self.env_ranks, sizes):
            key = action_key(self.wiring.action_queue, env_rank, stage)
            self.wiring.actions.put(ActionMessage(stage, step, actions[start : start + n]), key)
            start += n

    def _record_step(self, rec: dict, out, msgs: list[EnvStepMessage]) -> None:
        rec["forward_inputs"].append({k: v.cpu() for k, v in out.forward_inputs.items()})
        rec["action_record"].append(out.action_record.cpu())
        rec["logprobs"].append(out.logprobs.float().cpu())
        if self.compute_values:
            if out.values is None:
                raise ValueError("compute_values needs a policy with a value head (the config checks require add_value_head for critics)")
            rec["values"].append(out.values.float().cpu())

    def _record_outcome(self, rec: dict, msgs: list[EnvStepMessage]) -> torch.Tensor | None:
        """Record rewards/dones; returns V(final obs) [n, Kv] when some sub-env reset (else None)."""
        for key in ("rewards", "truncations", "dones"):
            rec[key].append(torch.from_numpy(np.concatenate([getattr(m, key) for m in msgs])))
        if not self.compute_values:
            return None
        n = sum(m.obs.num_envs for m in msgs)
        boot, final_values = torch.zeros(n), None
        if any(m.final_obs is not None for m in msgs):
            final = EnvObservation.concat([m.final_obs if m.final_obs is not None else m.obs for m in msgs])
            reset = np.concatenate([m.dones.any(-1) for m in msgs])
            final_values = self._values(final)
            boot = torch.where(torch.from_numpy(reset), final_values[:, 0], boot)
        rec["bootstrap_values"].append(boot)
        return final_values

    def _build(self, rec: list[dict]) -> Trajectory:
        """Stack time, then order the N axis by (env rank, stage, sub-env)."""
        k = len(self.env_ranks)

        def merge(get) -> torch.Tensor:
            per_stage = [get(rec[s]) for s in range(self.stages)]  # [T, k*n, ...] each (last values: T = 1)
            blocks = []
            for i in range(k):
                for block in per_stage:
                    n = block.shape[1] // k
                    blocks.append(block[:, i * n : (i + 1) * n])
            return torch.cat(blocks, dim=1)

        def field(key: str):
            return merge(lambda r: torch.stack(r[key]))

        fi_keys = list(rec[0]["forward_inputs"][0])
        values = last_values = boot = None
        if self.compute_values:
            values, last_values, boot = field("values"), field("last_values")[0], field("bootstrap_values")
        batch = RolloutBatch(
            forward_inputs={key: merge(lambda r, key=key: torch.stack([x[key] for x in r["forward_inputs"]])) for key in fi_keys},
            action_record=field("action_record"), logprobs=field("logprobs"), rewards=field("rewards"),
            truncations=field("truncations"), dones=field("dones"),
            values=values, last_values=last_values, bootstrap_values=boot,
            ref_logprobs=field("ref_logprobs") if rec[0].get("ref_logprobs") else None,
        )
        return Trajectory(batch, self.version)

    # ------------------------------------------------------------------ weights / memory
    def update_weights(self, weights: dict[str, torch.Tensor] | list[ray.ObjectRef], version: int) -> int:
        """Load the actor's trainable tensors; versions must strictly increase. `weights`: the
        whole state dict, or references to its buckets (distributed/weight_sync.py), fetched one
        at a time and copied into the policy where it lives (device or, offloaded, host), so
        this worker never holds more than one bucket beside its weights."""
        if version <= self.version:
            raise ValueError(f"rollout worker {self.rank}: weight version {version} is stale or duplicate (have {self.version})")
        self.policy.load_trainable_buckets(received_buckets(weights))
        self.version = version
        return version

    def offload(self) -> None:
        self.policy.to("cpu")
        if self.kl_reference is not None:
            self.kl_reference.to("cpu")
        torch.cuda.empty_cache()

    def onload(self) -> None:
        self.policy.to(self.device)
        if self.kl_reference is not None:
            self.kl_reference.to(self.device)

    def eval_generators(self, eval_epoch: int) -> DeviceGenerators:
        """Fresh generators for epoch `eval_epoch` of an evaluation: seeded by (seed, rank, epoch)
        only, so every evaluation (and both policies of a comparison) draw the same numbers."""
        return DeviceGenerators(int(np.random.SeedSequence([self.seed, self.rank, eval_epoch, 0xE7A1]).generate_state(1)[0]))

    def load_policy(self, model_path: str) -> int:
        """Rebuild the policy from the checkpoint at model_path (actor.model settings otherwise
        unchanged): a comparison evaluates several policies with the same workers. Weight version
        and dataset statistics start afresh (those of the checkpoint); returns the version, 0."""
        from embodied_rl.models.rollout_backends import build_rollout_policy

        cfg = dataclasses.replace(self.model_cfg, model_path=model_path)
        self.policy.close()  # an engine frees its memory before the next one starts
        self.policy = build_rollout_policy(self.backend, cfg, device=self.device, init_seed=self.seed,
                                           gpu_memory_utilization=self.gpu_memory_utilization)
        self.version = 0
        return self.version

    def get_rng_state(self) -> dict[str, torch.Tensor]:
        """The training stream of every device sampled on: {device: generator state}."""
        return self.generators.get_state()

    def set_rng_state(self, state: dict[str, torch.Tensor] | torch.Tensor) -> None:
        """Restore get_rng_state()'s streams, each on its own device only (see DeviceGenerators)."""
        self.generators.set_state(state)

    def close(self) -> None:
        self.policy.close()
        self.wiring.close()
