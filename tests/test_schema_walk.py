"""Schema walk: every config key, changed on its own, is either rejected or changes what runs.

Part of the default suite (marked slow). Alone: `python -m pytest tests/test_schema_walk.py -s`
(prints a verdict per key and the seconds per probe); `SCHEMA_WALK_ONLY=env.train.seed,runner`
walks only the keys under those prefixes.

Why a walk and not a test per key: a test per key is only as complete as its author's list,
and a key nobody listed (or a consumer line somebody deleted) goes unnoticed. The walk derives
the key list from the schema itself (every leaf of RootConfig, and every simulator's
`init_params` dataclass), so a new key is checked the day it is added, with no exemption list.

For each leaf the walk derives changed values from its type: a bool flips, a Literal takes
each other choice and an invalid one (a str whose help documents 'a | b | c' takes each),
numbers get a tiny, a doubled, a halved, zero and a negative value, Optional goes None <->
value (a changed value first, None second), lists drop or repeat items or replace the first
(by every choice for Literal items), strings get '' and a bogus name. Each changed config is
loaded with the real `load_config` (command-line override syntax); then the key's consumers
run for real:

- `algorithm`: compute_advantages + the actor-critic loss on fixed synthetic batches;
- `actor.model`, `rollout.model`, `algorithm.sampling_params`: the tiny OFT policy built from
  the config (rollout and actor copies), predict with the runtime's sampling specs and
  evaluate_actions on fixed observations, then one backward of the actor copy (its gradients
  and the activations saved for backward); a checkpoint the config makes is observed as the
  files written;
- `actor.*` (optim, fsdp_config, batch sizes, seed): one real FSDP2 train step of ActorWorker
  (gloo, world size 1, in-process) on a batch made by the real policy and compute_advantages,
  and the sharded module's parameters after a forward;
- `env.<mode>.*` incl. init_params: make_env on the simulator (ManiSkill's CPU sim; LIBERO for
  its own init_params), worker 0 / stage 0 of the runtime's own plan (placement,
  envs_per_worker), a reset, every chunk step of one rollout epoch with fixed actions and the
  next epoch's reset; observations, rewards, flags, episodes, metrics, video files. Fixed
  actions never succeed, so the `episode` probe replays the scripted expert of
  embodied_rl/demos (recorded once, in the background, from its reset ids) through make_env:
  episodes that really terminate;
- `cluster.*`, channels, rollout workers: a real RayCluster (a Ray session per cluster
  setting, kept while consecutive probes ask for the same), its placement, the channel wiring
  of build_groups and an in-process RolloutWorker;
- `env.<mode>.subproc.*`: the real sub-env process pool with a millisecond SubEnv, through one
  shared failure context (a sub-env whose simulator raises on consecutive steps);
- `*.group_name`: the names of Ray actors started by WorkerGroup on that RayCluster;
- `runner.*`: the run directory and console output written by MetricsLogger, and the project
  and run name of its wandb run read back from the offline run file;
- plan: placement, env split, chunk steps, the env modes stepped and worker groups started,
  the steps after which the training loop evaluates and saves, needs_reference and the
  batch-fit check of runtime/groups.py. The runner loop itself is not run (see probe_plan).

Verdict per key. Live if some accepted change gives an outcome different from the unchanged
config's (a consumer error counts as an outcome), or if every changed value is rejected with a
ConfigError (a key with one valid value, e.g. a one-choice Literal). A rejection next to
accepted-but-ignored values proves nothing: a range check on an ignored key would pass.
Some keys only act when another is set (high_level_gamma needs bi_level_gae, lora_rank needs
is_lora) or on a first run (create_preset acts only where no checkpoint exists yet): when the
walk base shows nothing, the walk retries in the world's contexts (a first run: the model not
created yet), on the other experiment configs, and on top of *switch* settings of the same
section (flags, choices, optionals), most related by name first. Per context the probes run
cheapest first, each on a few values: an expensive one only where the cheap ones saw nothing.
A context setting that, combined with the key's change, is rejected naming the setting also
proves the key gates it. A key of one simulator's init_params is walked on an experiment
config running that simulator (SIM_BASE).

Why the simulators are shared: building a sub-env process costs 5-20 s (imports, software
Vulkan, LIBERO's scene), so the walk registers a caching entry for each simulator in the
backend registry. It builds the real backend on a miss, keyed by everything the backend
constructor reads (params, task_description, subproc, sub-env count, seed), and keeps the
few most recently used (each sub-env process holds up to ~1 GB); all episode semantics,
adapter and video run for real in make_env on every probe. Probes are routed by section
(not by key) to keep the walk within its time budget; a key whose consumer no probe of its
section reaches is reported, never skipped.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from embodied_rl.config.loader import compose, to_dict
from embodied_rl.config.schema import RootConfig
from embodied_rl.errors import ConfigError
from tests.schema_walk_probes import (
    Leaf,
    Outcome,
    candidates,
    files_under,
    get_path,
    is_switch,
    override,
    quiet,
    relatedness,
    run_probe,
    schema_leaves,
    shares_name,
    try_load,
)
from tests.shared_simulators import cached_simulators
from tests.wandb_support import wandb_runs

pytestmark = [pytest.mark.slow, pytest.mark.maniskill, pytest.mark.libero]

BASE = "maniskill_ppo_tiny"
# Small and fast, and chosen so every consumer runs: 2 env workers x 2 sub-envs, episodes
# of 6 steps (2 chunks of 4, truncated inside the second), 8 samples = one global batch. Image
# sizes and simulator settings: SIM_SETTINGS below. The test appends the walk's model path.
BASE_OVERRIDES = [
    "cluster.num_cpu_slots=2", "rollout.pipeline_stage_num=1",
    "env.train.total_num_envs=4", "env.eval.total_num_envs=4",
    "env.train.max_episode_steps=6", "env.eval.max_episode_steps=6", "actor.model.num_action_chunks=4",
    "actor.micro_batch_size=4", "actor.global_batch_size=8",
    "actor.model.create_preset.image_size=56", "runner.output_dir=runs",
]
# A probe runs on the walk base and on at most this many further contexts (cost-bounded; the
# world's and the other experiments' contexts come first, then switches); cheap probes try up
# to MAX_TRIES accepted values per context, the others one.
MAX_CONTEXTS = {"algorithm": 16, "plan": 12, "rundir": 12, "subproc": 6, "model": 6, "env": 2, "episode": 0,
                "actor": 1, "ray": 0, "names": 0}
# The tiny model's FSDP step takes about a second: it gets several values too (lr_warmup_steps=1
# trains exactly like 0; 2 does not).
CHEAP = ("algorithm", "plan", "rundir", "subproc", "actor")
MAX_TRIES = 3
# Probes of one env mode (their outcome on a context depends on the key's mode).
MODE_PROBES = ("env", "episode", "subproc")
# Probes on a Ray session; it is kept between consecutive ones (see ray_cluster).
RAY_PROBES = ("ray", "names")


# ============================================================================ probes


def probe_algorithm(cfg: RootConfig, path: str) -> Any:
    from tests.test_algorithms_keys import adv_probe, loss_probe

    return adv_probe(cfg.algorithm), loss_probe(cfg.algorithm)


def probe_plan(cfg: RootConfig, path: str) -> Any:
    """The runtime's pure planning (config/plan.py): placement, derived sizes, env split, the
    env modes a run steps and the worker groups it starts, the steps after which the training
    loop evaluates and saves, whether it restarts after a worker death, and whether rollout computes reference log-probs (needs_reference,
    as build_groups asks). The runner loop itself is not run: its resume and checkpoint keys
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
                o = rollout.predict(inputs, do_sample=spec.do_sample, temperature=spec.temperature, top_k=spec.top_k,
                                    compute_values=cfg.algorithm.uses_critic, generator=gen)
                ev = actor.evaluate_actions(o.forward_inputs, o.action_tokens, temperature=sp.temperature_train,
                                            top_k=sp.top_k or 0, compute_values=cfg.algorithm.uses_critic)
                out[mode] = (o.actions, o.action_tokens, o.logprobs, o.values, o.forward_inputs, ev)
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
            ev = policy.evaluate_actions(predicted.forward_inputs, predicted.action_tokens, temperature=sp.temperature_train,
                                         top_k=sp.top_k or 0, compute_values=cfg.algorithm.uses_critic)
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
        next_lrs = [g["lr"] for g in worker.optimizer.param_groups]
        worker.policy.evaluate_actions({k: v[0, :2] for k, v in batch["forward_inputs"].items()},
                                       batch["action_tokens"][0, :2], compute_values=False)
        params = sorted(Counter((type(p).__name__, str(getattr(p, "placements", ""))) for p in worker.policy.parameters()).items())
    finally:
        worker.shutdown()
    metrics = {k: v for k, v in metrics.items() if not k.startswith("time/")}
    return info, metrics, sd, version, next_lrs, params


def _env_mode(path: str) -> str:
    parts = path.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "env" and parts[1] in MODES else "train"


def probe_env(cfg: RootConfig, path: str) -> Any:
    """Env worker 0, stage 0 of the runtime's plan: make_env, reset, one rollout epoch of chunks
    with fixed actions, then the next epoch's reset (fresh or fixed reset states)."""
    from embodied_rl.config.plan import chunk_steps_per_epoch
    from embodied_rl.envs import make_env

    mode = _env_mode(path)
    env_cfg = getattr(cfg.env, mode)
    per_stage, steps = probe_plan(cfg, path)[mode]
    assert steps == chunk_steps_per_epoch(cfg, mode)
    video_root = Path(env_cfg.video_cfg.video_base_dir).resolve()
    if Path.cwd().resolve() in video_root.parents:  # never the walk directory itself ('' = cwd)
        shutil.rmtree(video_root, ignore_errors=True)
    env = make_env(env_cfg, per_stage, seed_offset=0, video_dir=env_cfg.video_cfg.video_base_dir, env_worker=0, stage=0)
    try:
        m = cfg.actor.model
        t = np.linspace(-1.0, 1.0, per_stage * m.num_action_chunks * m.action_dim, dtype=np.float32)
        actions = (0.8 * np.sin(7 * t)).reshape(per_stage, m.num_action_chunks, m.action_dim)
        actions[..., -1] = np.abs(actions[..., -1])  # gripper in [0, 1]
        env.begin_video(1, 1, mode, cfg.runner.experiment_name)
        out: list[Any] = [env.reset()]
        for _ in range(steps):
            out.append(env.chunk_step(actions))
        out.append(env.pop_metrics())
        env.end_video()
        out.append((env.reset(), env.reset_ids.copy()))
    finally:
        env.close()
    out.append(files_under(video_root) if video_root.exists() else None)
    return out


def _expert_episodes(base: RootConfig) -> list[Any]:
    """Two successful episodes of the real scripted expert in the walk base's train env,
    recorded once by the demos recorder in a process of its own (the expert reads the
    simulator's ground truth, which the pooled sub-envs keep to themselves). Before it, the
    walk base's simulator is built for the env probes (both run while the first sections,
    whose probes use one core, are walked)."""
    from embodied_rl.envs import make_env

    per_stage, _ = probe_plan(base, "env.train")["train"]
    make_env(base.env.train, per_stage).close()  # kept by the shared simulators
    from embodied_rl.demos.collect import collect
    from embodied_rl.demos.sources import ProcessSource
    from embodied_rl.demos.spec import DemoSpec

    spec = DemoSpec.from_config(base)
    spec = dataclasses.replace(spec, env_cfg=dataclasses.replace(spec.env_cfg, max_episode_steps=EXPERT_MAX_STEPS))
    episodes: list[Any] = []
    collect(ProcessSource(spec, 1), num_demos=4, seed_start=0, max_attempts=10, on_demo=episodes.append)
    assert len(episodes) == 4, "the scripted expert solved fewer than 4 of 10 episodes"
    return sorted(episodes, key=lambda e: e.length)[:2]  # the shortest: fewer steps to replay


EXPERT_MAX_STEPS = 48
_EXPERT: dict[str, Future] = {}


def expert_episodes() -> list[Any]:
    """The recorded expert episodes; the test starts recording in the background at its start."""
    if "future" not in _EXPERT:
        _EXPERT["future"] = ThreadPoolExecutor(1).submit(_expert_episodes, load_in(()))
    return _EXPERT["future"].result()


def probe_episode(cfg: RootConfig, path: str) -> Any:
    """Episodes that really end: the scripted expert's recorded actions replayed from its reset
    ids through make_env (success, terminations, auto-resets, metrics). The horizon is raised to
    cover the expert's episodes and two steps more; the env probe covers max_episode_steps."""
    from embodied_rl.envs import make_env

    mode = _env_mode(path)
    env_cfg = getattr(cfg.env, mode)
    if env_cfg.env_type != _env_type((), "train"):
        return None  # the expert's actions were recorded in the walk base's simulator
    episodes = expert_episodes()
    per_stage, _ = probe_plan(cfg, path)[mode]
    c, a = cfg.actor.model.num_action_chunks, cfg.actor.model.action_dim
    chunks = -(-(max(e.length for e in episodes) + 2) // c)
    actions = np.zeros((per_stage, chunks * c, a), np.float32)
    for i in range(per_stage):
        rec = episodes[i % len(episodes)].policy_actions
        if rec.shape[1] != a:
            return ("expert actions have", rec.shape[1], "dims, the policy", a)
        actions[i, :len(rec)], actions[i, len(rec):] = rec, rec[-1]
    # The expert was recorded from training-split states; replaying them needs every split's
    # ids (the env probe observes reset_id_split itself).
    env_cfg = dataclasses.replace(env_cfg, max_episode_steps=max(env_cfg.max_episode_steps, chunks * c), reset_id_split="all")
    env = make_env(env_cfg, per_stage, seed_offset=0, env_worker=0, stage=0)
    try:
        env.set_reset_ids([episodes[i % len(episodes)].reset_id for i in range(per_stage)])
        out: list[Any] = [env.reset()]
        out += [env.chunk_step(actions[:, k * c:(k + 1) * c]) for k in range(chunks)]
        out.append(env.pop_metrics())
    finally:
        env.close()
    return out


def probe_ray(cfg: RootConfig, path: str) -> Any:
    """The RayCluster of cluster.*, its placement, build_groups' channel wiring, and an
    in-process RolloutWorker built with the arguments build_groups gives it."""
    import ray

    from embodied_rl.runtime import groups
    from embodied_rl.workers.rollout_worker import RolloutWorker

    c = cfg.cluster
    cluster = ray_cluster(c)
    try:
        placement = cluster.placement(c.component_placement)
        wiring = groups._wiring(cfg, run_id="walk")
        try:
            chans = {k: (ch.name, ch.queue_size) for k in ("obs", "actions", "trajectories") if (ch := getattr(wiring, k))}
            worker = RolloutWorker(
                dataclasses.replace(cfg.actor.model, model_path=cfg.rollout.model.model_path), wiring, rank=0, world_size=1,
                **groups.rollout_worker_kwargs(cfg, placement["env"].num_processes))
            # What the worker built (policies, reference, generator seed, served env ranks).
            rollout = (worker.env_ranks, worker.generator.initial_seed(),
                       sorted((k, type(v).__name__) for k, v in vars(worker).items() if v is not None))
            worker.policy.close()  # an engine (rollout.backend) frees its memory here
        finally:
            for ch in {id(x): x for x in (wiring.obs, wiring.actions, wiring.trajectories) if x}.values():
                ch.shutdown()
        return (cluster.num_slots, cluster.slots_per_node, cluster.accelerator, ray.cluster_resources().get("CPU"),
                {k: v.process_slots for k, v in placement.components.items()}, chans,
                (wiring.obs_queue, wiring.action_queue, wiring.trajectory_queue), rollout)
    except BaseException:
        shutdown_ray()  # its state is unknown: the next probe starts afresh
        raise


_RAY: dict[str, Any] = {}
_NAMESPACES = itertools.count()


def ray_cluster(c) -> Any:
    """The RayCluster of cluster settings `c`, kept while consecutive Ray probes ask for the same
    settings (a Ray session takes seconds to start); other settings get a fresh session, and
    any other probe ends it (config loading and planning read a running session's resources)."""
    import ray

    from embodied_rl.distributed.worker_group import RayCluster

    key = repr(dataclasses.asdict(c))
    if _RAY.get("key") != key:
        shutdown_ray()
        if ray.is_initialized():
            ray.shutdown()
        _RAY["cluster"] = RayCluster(address=c.address, num_nodes=c.num_nodes, num_cpu_slots=c.num_cpu_slots, wait_nodes_s=3.0)
        _RAY["key"] = key
    return _RAY["cluster"]


@functools.cache
def _base_cluster() -> Any:
    base = load_in(())
    assert not isinstance(base, Outcome), base.summary
    return base.cluster


def shutdown_ray() -> None:
    import ray

    _RAY.pop("key", None)
    cluster = _RAY.pop("cluster", None)
    if cluster is not None:
        cluster.shutdown()
    if ray.is_initialized():
        ray.shutdown()


def probe_subproc(cfg: RootConfig, path: str) -> Any:
    """env.<mode>.subproc on the real SubprocBackend/SubprocEnvPool (what the ManiSkill CPU and
    LIBERO backends build from it), hosting a millisecond SubEnv (schema_walk_subenv.py): start,
    reset, and 5 steps in which sub-env 0's simulator raises on steps 1-3 (the one shared failure
    context: restarts, failed flags, max_restarts). The SubEnv reports whether a fork server
    started it. Why not ManiSkill: a deadline change rebuilds children, 5-20 s each, up to
    max_restarts times; the env probe still covers ManiSkill with the shipped deadlines."""
    from embodied_rl.envs.subproc_backend import SubprocBackend
    from tests.schema_walk_subenv import CounterFactory

    env_cfg = getattr(cfg.env, path.split(".")[1])
    backend = SubprocBackend(CounterFactory(os.getpid()), 2, options=env_cfg.subproc)
    try:
        out: list[Any] = [backend.reset([0, 1], [7, 8])]
        for t in range(5):
            actions = np.array([[-1.0 if t < 3 else 1.0, t], [1.0, t]], np.float32)
            out.append(backend.step(actions))
        return out, backend.pool.num_restarts
    finally:
        backend.close()


def probe_names(cfg: RootConfig, path: str) -> Any:
    """Names of the Ray actors a WorkerGroup per component gets from its section's group_name,
    read back from Ray, started as build_groups starts them (a namespace of the run's own) on
    the RayCluster of cluster.*. Covers the naming, not which key build_groups passes (starting
    the real workers is the e2e tests' job). Its own probe: the actors cost seconds on every start."""
    c = cfg.cluster
    cluster = ray_cluster(c)
    try:
        return _actor_names(cfg, cluster, cluster.placement(c.component_placement))
    except BaseException:
        shutdown_ray()
        raise


def _actor_names(cfg: RootConfig, cluster, placement) -> list[str]:
    import ray

    from embodied_rl.distributed.worker_group import WorkerGroup

    class Named:  # the smallest Ray actor; local, so Ray ships it by value (workers lack tests/)
        def __init__(self, rank: int, world_size: int) -> None:
            pass

        def ping(self) -> int:
            return 0

    ns = f"schema-walk-{os.getpid()}-{next(_NAMESPACES)}"  # a namespace per probe: no stale names
    started = []
    try:
        for component in ("env", "rollout", "actor"):
            started.append(WorkerGroup(Named, cluster, placement, component, namespace=ns,
                                       name=getattr(cfg, component).group_name))
            started[-1].ping().wait(120)
        return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == ns)
    finally:
        for group in started:
            group.shutdown()


def probe_rundir(cfg: RootConfig, path: str) -> Any:
    """What MetricsLogger writes for one step (files and console), timestamps masked, and the
    project and run name of its wandb run (offline: tests/conftest.py sets WANDB_MODE)."""
    import re

    from embodied_rl.runtime.metrics_logger import MetricsLogger

    # The probe runs in its own directory, emptied before and after, so that the relative
    # log paths of the configs land inside it.
    root = Path.cwd() / "rundir"
    root.mkdir(exist_ok=True)
    _empty(root)
    here = Path.cwd()
    os.chdir(root)
    try:
        with quiet() as out, MetricsLogger(cfg.runner.logger, cfg.runner.logger.log_path, total_steps=cfg.runner.max_steps,
                                           config=to_dict(cfg), stream=None) as logger:
            logger.log(1, {"env/success_once": 0.5, "train/actor/total_loss": 1.0})
        # wandb's own files vary from run to run (written by its service process): observed
        # as its directory here, and through its run record below.
        names = sorted({re.sub(r"\d{6,}.*|(?<=wandb)/.*", "<t>", str(p.relative_to(root)))
                        for p in root.rglob("*") if p.is_file()})
        jsonl = [p.read_text() for p in root.rglob("metrics.jsonl")]
        console = re.sub(r"\d+(\.\d+)?\s*(s|it/s|ms)\b|\d\d:\d\d(:\d\d)?", "<t>", out.getvalue())
        return names, [re.sub(r'"time": [0-9.e+-]+', "", j) for j in jsonl], console, wandb_runs(root)
    finally:
        os.chdir(here)
        _empty(root)


def _empty(root: Path) -> None:
    for p in root.iterdir():
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


PROBES: dict[str, Callable[[RootConfig, str], Any]] = {
    "algorithm": probe_algorithm, "plan": probe_plan, "rundir": probe_rundir, "model": probe_model,
    "env": probe_env, "actor": probe_actor, "ray": probe_ray, "subproc": probe_subproc,
    "names": probe_names, "episode": probe_episode,
}

# Consumers of each section, cheapest first (a key is routed by its longest matching prefix).
ROUTES: dict[str, tuple[str, ...]] = {
    "cluster": ("plan", "env", "ray"),
    "runner": ("rundir", "plan", "actor"),
    "algorithm": ("algorithm", "plan", "model", "actor"),
    "algorithm.sampling_params": ("model",),
    "env": ("ray",),
    "env.train": ("plan", "env", "episode"),
    "env.eval": ("plan", "env", "episode"),
    # The cheap pool first: the env probe rebuilds ManiSkill children on every deadline change.
    "env.train.subproc": ("subproc", "env"),
    "env.eval.subproc": ("subproc", "env"),
    "rollout": ("plan", "env", "model", "ray"),
    "actor": ("plan", "actor", "ray"),
    "actor.model": ("model", "actor"),
    "data": ("plan",),
    "env.group_name": ("names",), "rollout.group_name": ("names",), "actor.group_name": ("names",),
}


def route(path: str) -> tuple[str, ...]:
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in ROUTES:
            return ROUTES[".".join(parts[:n])]
    raise KeyError(f"no probe route for {path}")


def section_of(path: str) -> str:
    """The parent section whose switches form a key's contexts."""
    parts = path.split(".")
    if parts[0] == "env" and len(parts) > 2 and parts[1] in ("train", "eval"):
        return ".".join(parts[:2])
    return parts[0] if parts[0] != "actor" or len(parts) < 3 else ".".join(parts[:2])


# ============================================================================ the walk

# The other experiment configs are contexts too (e.g. GRPO settings span several sections).
OTHER_EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "configs").glob("*.yaml") if p.stem != BASE)
MODES = ("train", "eval")
# Switches named like a key (is_lora for lora_rank) tried before the other experiments.
MAX_NAMED_SWITCHES = 2
# Set in every env mode that runs the simulator, whichever env config the context picked: small
# images, and settings that let train and eval share one simulator.
SIM_SETTINGS: dict[str, dict[str, Any]] = {
    # A robot with a hand camera, so the wrist-camera keys have something to select.
    "maniskill": {"camera_heights": 32, "camera_widths": 32, "reward_mode": "normalized_dense", "robot_uids": "panda_wristcam"},
    # One task (a sub-env builds a task's scene on first use), no settle steps.
    "libero": {"camera_heights": 32, "camera_widths": 32, "task_ids": [0], "num_steps_wait": 0},
}
# The walk base of a key in another simulator's init_params: an experiment config running it.
SIM_BASE = {"libero": "libero_grpo_tiny"}
# Contexts of the world rather than of a key, for keys routed to a probe: a first run, before the
# model exists (set by the test, under the walk directory).
WORLD_CONTEXTS: dict[str, list[tuple[str, ...]]] = {}
_ENV_PICK = re.compile(r"^env\.(train|eval)=")


def _split(ctx: tuple[str, ...]) -> tuple[str, list[str]]:
    """(experiment, overrides) of a context; '@<name>' picks another experiment config."""
    names = [c[1:] for c in ctx if c.startswith("@")]
    return (names[0] if names else BASE), [c for c in ctx if not c.startswith("@")]


@functools.cache
def _sim_overrides(ctx: tuple[str, ...]) -> tuple[str, ...]:
    """SIM_SETTINGS of the simulator each env mode runs in this context."""
    name, ctx_ov = _split(ctx)
    tree = compose(name, [*BASE_OVERRIDES, *(c for c in ctx_ov if _ENV_PICK.match(c))])
    out: list[str] = []
    for mode in MODES:
        env = tree["env"][mode]
        sim, params = env.get("env_type"), env.get("init_params") or {}
        out += [override(f"env.{mode}.init_params.{k}", v, k in params) for k, v in SIM_SETTINGS.get(sim, {}).items()]
    return tuple(out)


def _overrides(ctx: tuple[str, ...], *extra: str) -> tuple[str, list[str]]:
    name, ctx_ov = _split(ctx)
    try:
        sim = list(_sim_overrides(ctx))
    except ConfigError:  # a context that does not compose: load_config reports it
        sim = []
    return name, [*BASE_OVERRIDES, *sim, *ctx_ov, *extra]


def load_in(ctx: tuple[str, ...], *extra: str) -> RootConfig | Outcome:
    """Load the walk base (or '@<experiment>') with the context's and the change's overrides."""
    return try_load(*_overrides(ctx, *extra))


@functools.cache
def _tree(ctx: tuple[str, ...]) -> dict:
    return compose(*_overrides(ctx))


def _env_type(ctx: tuple[str, ...], mode: str) -> str | None:
    try:
        return _tree(ctx)["env"][mode]["env_type"]
    except ConfigError:
        return None


def present(ctx: tuple[str, ...], path: str) -> bool:
    """Whether a key exists in the context's composed tree (else `+key=` adds it)."""
    node: Any = _tree(ctx)
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@dataclasses.dataclass
class Verdict:
    path: str
    live: bool
    evidence: str


class Walker:
    def __init__(self, leaves: list[Leaf]) -> None:
        self.leaves = leaves
        self._base_outcomes: dict[tuple[str, str, str], Outcome] = {}
        self.timings: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def _probe(self, name: str, cfg: RootConfig, path: str) -> Outcome:
        t0 = time.perf_counter()
        if name not in RAY_PROBES:  # a running Ray session is what detect_resources reads
            shutdown_ray()
        out = run_probe(PROBES[name], cfg, path)
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0
        self.calls[name] = self.calls.get(name, 0) + 1
        return out

    def _base(self, ctx: tuple[str, ...], name: str, cfg: RootConfig, path: str, walk_base: bool) -> Outcome:
        mode_key = path.split(".")[1] if name in MODE_PROBES and path.startswith("env.") else ""
        key = (repr(ctx), name, mode_key)
        if key not in self._base_outcomes:
            first = self._probe(name, cfg, path)
            if name not in ("ray", "actor", "names"):  # the cheap probes are checked for determinism
                again = self._probe(name, cfg, path)
                assert first == again, f"probe {name} is not deterministic on {ctx}: {first.summary} vs {again.summary}"
            # A consumer that fails on the walk base observes nothing: that is a broken probe.
            assert not walk_base or not first.error, f"probe {name} fails on the walk base {ctx}: {first.summary}"
            self._base_outcomes[key] = first
        return self._base_outcomes[key]

    @staticmethod
    def sim_of(leaf: Leaf) -> str | None:
        """The simulator a key is walked in: its own for init_params keys, else the base's."""
        if leaf.sim is not None:
            return leaf.sim
        parts = leaf.path.split(".")
        mode = parts[1] if parts[0] == "env" and len(parts) > 2 and parts[1] in MODES else "train"
        return _env_type((), mode)

    def base_context(self, leaf: Leaf) -> tuple[str, ...]:
        """The walk base, or for another simulator's init_params key, an experiment running it."""
        if self.sim_of(leaf) == Walker.sim_of(dataclasses.replace(leaf, sim=None)):
            return ()
        return (f"@{SIM_BASE[leaf.sim]}",)

    def contexts(self, leaf: Leaf) -> list[tuple[tuple[str, ...], str | None]]:
        """(overrides, switch key) to try: the walk base, the world's contexts, the switches of
        the key's section named like it (lora_rank: is_lora), the other experiments (in the key's
        simulator), then the other switches of its section, most related first. Named switches
        go before the experiments so adding a config never pushes them past the budget."""
        base_ctx = self.base_context(leaf)
        base_cfg = load_in(base_ctx)
        assert not isinstance(base_cfg, Outcome), f"the walk base of {leaf.path} does not load: {base_cfg.summary}"
        out: list[tuple[tuple[str, ...], str | None]] = [(base_ctx, None)]
        out += [(base_ctx + w, w[0].split("=")[0]) for p in route(leaf.path) for w in WORLD_CONTEXTS.get(p, [])]
        section, sim = section_of(leaf.path), self.sim_of(leaf)
        mode = section.split(".")[1] if section.startswith("env.") else "train"
        scored = []
        for sw in self.leaves:
            if sw.path == leaf.path or section_of(sw.path) != section or sw.sim not in (None, sim):
                continue
            for value in candidates(sw, get_path(base_cfg, sw.path)):
                score = relatedness(leaf, sw, value) + is_switch(sw)
                scored.append((-score, sw.path, value, is_switch(sw) and shares_name(leaf, sw)))
        scored.sort(key=lambda s: (s[0], s[1]))
        switches = [((*base_ctx, override(path, value, present(base_ctx, path))), path) for _, path, value, _ in scored]
        named = [ctx for ctx, (*_, is_named) in zip(switches, scored) if is_named][:MAX_NAMED_SWITCHES]
        out += named
        for name in [BASE, *OTHER_EXPERIMENTS]:
            ctx = () if name == BASE else (f"@{name}",)
            if ctx != base_ctx and (not section.startswith("env.") or _env_type(ctx, mode) == sim):
                out.append((ctx, None))
        out += [ctx for ctx in switches if ctx not in named]
        budget = max(MAX_CONTEXTS[p] for p in route(leaf.path))
        return out[: budget + 1]

    def judge(self, leaf: Leaf) -> Verdict:
        # A Ray session of the walk base's cluster settings may stay for the next key's Ray
        # probes: configs load the same with it (same slots). Any other goes.
        if _RAY.get("key") != repr(dataclasses.asdict(_base_cluster())):
            shutdown_ray()
        verdict = self._judge(leaf)
        return dataclasses.replace(verdict, path=f"{leaf.path} ({leaf.sim})") if leaf.sim else verdict

    def _judge(self, leaf: Leaf) -> Verdict:
        notes: list[str] = []
        contexts = self.contexts(leaf)
        for i, (ctx, switch) in enumerate(contexts):
            ctx_cfg = load_in(ctx)
            if isinstance(ctx_cfg, Outcome):
                continue
            where = f" on top of {' '.join(ctx)}" if ctx else ""
            cands = candidates(leaf, get_path(ctx_cfg, leaf.path))
            rejected: dict[str, str] = {}
            accepted: list[tuple[str, RootConfig]] = []
            for value in cands:
                ov = override(leaf.path, value, present(ctx, leaf.path))
                cfg = load_in(ctx, ov)
                if not isinstance(cfg, Outcome):
                    accepted.append((ov, cfg))
                    continue
                rejected[ov] = cfg.summary
                if switch and switch.rsplit(".", 1)[-1] in cfg.summary:  # the key gates the switch
                    return Verdict(leaf.path, True, f"{ov}{where} rejected: {cfg.summary}")
            # Probe by probe, cheapest first: an expensive consumer runs only where the cheap ones
            # saw no change on any value.
            probes = [p for p in route(leaf.path) if i <= MAX_CONTEXTS[p]]
            for name in probes:
                verdict = self._compare(leaf, name, ctx, ctx_cfg, accepted, rejected, where, walk_base=i == 0)
                if verdict is not None:
                    return verdict
            if i == 0 and cands and len(rejected) == len(cands):
                ov, why = next(iter(rejected.items()))
                return Verdict(leaf.path, True, f"every changed value rejected{where}, e.g. {ov}: {why}")
            if i == 0:
                notes.append(f"{len(cands)} values ({len(rejected)} rejected) changed none of {probes}{where}")
        notes.append(f"nor on {len(contexts) - 1} related settings")
        return Verdict(leaf.path, False, "; ".join(notes))

    def _compare(self, leaf: Leaf, name: str, ctx: tuple[str, ...], ctx_cfg: RootConfig, accepted: list[tuple[str, RootConfig]],
                 rejected: dict[str, str], where: str, walk_base: bool) -> Verdict | None:
        """Probe `name` on up to its number of tries of the accepted values (cheap probes
        MAX_TRIES, expensive ones one per context)."""
        tries = 0
        for ov, cfg in accepted:
            if ov in rejected:  # refused by an earlier consumer
                continue
            if tries >= (MAX_TRIES if name in CHEAP else 1):
                break
            base = self._base(ctx, name, ctx_cfg, leaf.path, walk_base)
            if base.rejected:
                return None
            got = self._probe(name, cfg, leaf.path)
            if got.rejected:  # the consumer refused the value: try the next one
                rejected[ov] = f"{name}: {got.summary}"
                continue
            tries += 1
            if got != base:
                return Verdict(leaf.path, True, f"{ov}{where}: probe {name} changed ({base.summary[:50]} -> {got.summary[:50]})")
        return None


# ============================================================================ fixtures and test


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("schema_walk")
    cwd, threads = Path.cwd(), torch.get_num_threads()
    os.chdir(root)  # relative run dirs, videos and bogus paths land here, not in the checkout
    # The tiny model's kernels are too small to share: a second thread only spins, and on a busy
    # machine (simulator processes) it makes the in-process probes ~10x slower.
    torch.set_num_threads(1)
    yield root
    torch.set_num_threads(threads)
    os.chdir(cwd)


@pytest.fixture(scope="module")
def shared_simulators():
    """Real simulator backends cached by what their constructor reads (see the module docstring)."""
    with cached_simulators() as cache:
        yield cache
        shutdown_ray()


def walk_order(leaves: list[Leaf]) -> list[Leaf]:
    """Schema order, but the env modes' keys last (their simulator and expert are prepared in the
    background meanwhile), each env.eval key right after its env.train twin: train and eval
    share simulators (SIM_SETTINGS), so the twin's changed simulator is still cached."""
    first: dict[tuple[str, str | None], int] = {}
    for i, leaf in enumerate(leaves):
        first.setdefault((leaf.path.replace("env.eval.", "env.train.", 1), leaf.sim), i)
    def key(leaf: Leaf) -> tuple:
        twin = (leaf.path.replace("env.eval.", "env.train.", 1), leaf.sim)
        return leaf.path.startswith(("env.train.", "env.eval.")), first[twin], leaf.path.startswith("env.eval.")

    return sorted(leaves, key=key)


def test_every_key_is_live(walk_dir: Path, shared_simulators):
    from embodied_rl.envs.backend import available_simulators, get_simulator
    from embodied_rl.runtime.train import ensure_model

    BASE_OVERRIDES.append(f"actor.model.model_path={walk_dir / 'tiny-oft'}")
    WORLD_CONTEXTS["model"] = [(f"actor.model.model_path={walk_dir / 'first-run-model'}",)]
    base = load_in(())
    assert not isinstance(base, Outcome), base.summary
    base_seed = dataclasses.replace(base, runner=dataclasses.replace(base.runner, seed=base.runner.seed + 1))
    with quiet():
        ensure_model(base_seed)  # a preset made from another seed, so re-creating one is visible

    leaves = walk_order(schema_leaves(RootConfig, "", {name: get_simulator(name).params_cls for name in available_simulators()}))
    walker = Walker(leaves)
    only = tuple(os.environ.get("SCHEMA_WALK_ONLY", "").split(","))  # debugging: key prefixes to walk
    walked = [leaf for leaf in leaves if not any(only) or leaf.path.startswith(only)]
    if any("episode" in route(leaf.path) for leaf in walked):  # recorded while the walk starts
        import ray  # noqa: F401 - imported here, not half-imported by the thread while a load checks it

        probe_plan(base, "env.train")  # the same for the modules the thread imports
        _EXPERT["future"] = ThreadPoolExecutor(1).submit(_expert_episodes, base)
    verdicts = []
    t_walk = time.perf_counter()
    for leaf in walked:
        t0 = time.perf_counter()
        v = walker.judge(leaf)
        verdicts.append(v)
        print(f"{'live ' if v.live else 'INERT'} {v.path} ({time.perf_counter() - t0:.1f} s): {v.evidence}", flush=True)
    print(f"{len(verdicts)} keys in {time.perf_counter() - t_walk:.0f} s; probe seconds (calls):",
          {k: f"{v:.1f} ({walker.calls[k]})" for k, v in walker.timings.items()})
    inert = [v for v in verdicts if not v.live]
    assert not inert, f"{len(inert)} of {len(verdicts)} keys change nothing and are not rejected:\n" + "\n".join(
        f"  {v.path}: {v.evidence}" for v in inert)
