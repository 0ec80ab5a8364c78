"""Probes of tests/test_schema_walk.py for the learning side: the algorithm's estimators and
losses, the run plan, the policy (rollout and actor copies) and one FSDP2 train step. Each
returns a fingerprint of what its consumer did (see schema_walk_probes.py). Not a test module."""
from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_rl.config.schema import RootConfig
from tests.schema_walk_probes import files_under, quiet


def probe_algorithm(cfg: RootConfig, path: str) -> Any:
    from tests.test_algorithms_keys import adv_probe, loss_probe

    return adv_probe(cfg.algorithm), loss_probe(cfg.algorithm)


def probe_plan(cfg: RootConfig, path: str) -> Any:
    """The runtime's pure planning (config/plan.py): placement, derived sizes, env split, the
    env modes a run steps and the worker groups it starts, the steps after which the training
    loop evaluates and saves, whether it restarts after a worker death, whether rollout computes reference log-probs (needs_reference,
    as build_groups asks), and the memory plan with the device memory it is checked against. The runner loop itself is not run: its resume and checkpoint keys
    are live here only through their checks."""
    from embodied_rl.config.plan import (
        chunk_steps_per_epoch,
        components,
        evaluates_after,
        may_restart,
        plan_run,
        saves_after,
        used_modes,
    )
    from embodied_rl.distributed.resources import detect_resources
    from embodied_rl.memory.plan import memory_plan
    from embodied_rl.runtime.groups import needs_reference
    from embodied_rl.workers.env_worker import envs_per_worker, rollout_rank_of

    cfg = dataclasses.replace(cfg)  # plan_run fills derived keys in place
    plan = plan_run(cfg, detect_resources(cfg.cluster))
    n_env, n_roll = plan.env_workers, plan.rollout_workers
    out: dict[str, Any] = {"placement": {k: v.process_slots for k, v in plan.placement.components.items()},
                           "resources": dataclasses.replace(plan.resources, source=""),  # the text varies with a Ray session
                           "batch": (cfg.actor.global_batch_size, cfg.actor.micro_batch_size)}
    out["rollout_of_env"] = [rollout_rank_of(e, n_env, n_roll) for e in range(n_env)]
    out["reference"] = needs_reference(cfg)
    out["memory"] = memory_plan(cfg, plan).table()  # the forecast and the device memory it is held against
    out["modes"], out["components"] = used_modes(cfg), components(cfg)
    out["schedule"] = [(s, evaluates_after(cfg, s), saves_after(cfg, s)) for s in range(cfg.runner.max_steps + 1)]
    out["restarts"] = [may_restart(cfg, n) for n in range(4)]
    for mode in ("train", "eval"):
        out[mode] = (envs_per_worker(getattr(cfg.env, mode).total_num_envs, n_env, cfg.rollout.pipeline_stage_num, mode),
                     chunk_steps_per_epoch(cfg, mode))
    return out


_POLICIES: dict[str, Any] = {}


def _policy(model_cfg) -> Any:
    from embodied_rl.models import build_policy

    key = repr(dataclasses.asdict(model_cfg))
    if key not in _POLICIES:
        torch.manual_seed(0)  # value head / LoRA init: the same for equal configs
        _POLICIES[key] = build_policy(model_cfg, device="cpu").eval()
    return _POLICIES[key]


def _fixed_obs(policy, n: int = 3):
    from embodied_rl.types import EnvObservation

    rng = np.random.default_rng(0)
    size = policy.arch.image_size
    return EnvObservation(
        main_images=rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
        states=rng.standard_normal((n, 8)).astype(np.float32),
        task_descriptions=["pick up the red cube"] * n,
        wrist_images=rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
    )


def probe_model(cfg: RootConfig, path: str) -> Any:
    """Rollout copy (rollout.model.model_path) predicts with the runtime's sampling specs; the
    actor copy re-scores the tokens, and once more with gradients (see _training_signal).
    Checkpoints missing on disk are created as the CLI does, and the files written observed."""
    from embodied_rl.runtime.groups import sampling_specs
    from embodied_rl.runtime.train import ensure_model

    m = cfg.actor.model
    created = [p for p in {m.model_path, cfg.rollout.model.model_path}
               if p and not (Path(p) / "config.json").exists() and not Path(p).exists()]
    # A safety limit, not a verdict: the other presets take GBs (the config checks refuse them
    # next to the walk's tiny checkpoint, so only a broken check gets here).
    if created and m.create_preset is not None and m.create_preset.name != "tiny":
        raise RuntimeError(f"the walk creates only the tiny preset, not {m.create_preset.name!r}")
    try:
        with quiet():
            ensure_model(cfg)
        out: dict[str, Any] = {"created": [files_under(Path(p)) for p in sorted(created)]}
        _POLICIES.clear() if created else None
        rollout = _policy(dataclasses.replace(m, model_path=cfg.rollout.model.model_path))
        actor = _policy(m)
        out["trainable"] = {k: (v.dtype, tuple(v.shape)) for k, v in actor.trainable_state_dict().items()}
        sp = cfg.algorithm.sampling_params
        with torch.no_grad():
            inputs = rollout.prepare_inputs(_fixed_obs(rollout))
            for mode, spec in sampling_specs(cfg).items():
                gen = torch.Generator().manual_seed(1)
                o = rollout.predict(inputs, do_sample=spec.do_sample, temperature=spec.temperature,
                                    compute_values=cfg.algorithm.uses_critic, generator=gen)
                ev = actor.evaluate_actions(o.forward_inputs, o.action_record, temperature=sp.temperature_train,
                                            compute_values=cfg.algorithm.uses_critic)
                out[mode] = (o.actions, o.action_record, o.logprobs, o.values, o.forward_inputs, ev)
        out["training"] = _training_signal(actor, o, cfg)
        return out
    finally:
        for p in created:
            shutil.rmtree(p, ignore_errors=True)
        if created:
            _POLICIES.clear()


def _training_signal(policy, predicted, cfg: RootConfig) -> Any:
    """One backward of the actor copy in training mode through the re-scored tokens: the
    gradients (fresh LoRA adapters leave every output unchanged, B = 0, but their scaling shows
    here) and the activations the forward saves for backward (what gradient checkpointing
    changes; the numbers it computes are the same)."""
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    sp = cfg.algorithm.sampling_params
    policy.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            ev = policy.evaluate_actions(predicted.forward_inputs, predicted.action_record, temperature=sp.temperature_train,
                                         compute_values=cfg.algorithm.uses_critic)
        loss = ev["logprobs"].float().sum()
        if ev.get("values") is not None:
            loss = loss + ev["values"].float().sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    finally:
        policy.zero_grad(set_to_none=True)
        policy.eval()
    return grads, len(saved), sum(saved)


_BATCHES: dict[str, dict] = {}


def probe_actor(cfg: RootConfig, path: str) -> Any:
    """One real FSDP2 train step (gloo, world 1, this process) on a real-policy batch, the
    learning rates its scheduler sets for the next step, and the sharded module's state after a
    forward (which parameters stay gathered, on which mesh: the sharding strategy)."""
    from embodied_rl.workers.actor import fsdp
    from embodied_rl.workers.actor.worker import ActorWorker
    from tests.actor_fixtures import make_rollout_batch

    key = repr((dataclasses.asdict(cfg.actor.model), dataclasses.asdict(cfg.algorithm), cfg.actor.seed))
    if key not in _BATCHES:
        _BATCHES.clear()
        _BATCHES[key] = make_rollout_batch(cfg)
    batch = _BATCHES[key]
    worker = ActorWorker(cfg, 0, 1)
    try:
        info = worker.setup("127.0.0.1", fsdp.free_port())
        metrics = worker.train_step(batch)
        sd, version = worker.get_trainable_state_dict()
        # The LR the scheduler set for the next step: one step cannot show a schedule otherwise.
        next_lrs = [g["lr"] for g in worker.engine.optimizer.param_groups]
        worker.policy.evaluate_actions({k: v[0, :2] for k, v in batch.forward_inputs.items()},
                                       batch.action_record[0, :2], compute_values=False)
        params = sorted(Counter((type(p).__name__, str(getattr(p, "placements", ""))) for p in worker.policy.parameters()).items())
    finally:
        worker.shutdown()
    metrics = {k: v for k, v in metrics.items() if not k.startswith("time/")}
    return info, metrics, sd, version, next_lrs, params
