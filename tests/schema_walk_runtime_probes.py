"""Probes of tests/test_schema_walk.py for the runtime side: the simulator (env and expert
episodes), Ray (cluster, channels, rollout worker, actor names) and the sub-env pool (the run
directory's and health probes: schema_walk_run_probes.py); and the routes from a key's section to
the probes that consume it. Not a test module."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from embodied_rl.config.schema import RootConfig
from tests.schema_walk_contexts import MODES, env_type_in, load_in
from tests.schema_walk_learning_probes import (
    probe_actor,
    probe_algorithm,
    probe_model,
    probe_plan,
)
from tests.schema_walk_probes import RAY_SESSION, Outcome, files_under
from tests.schema_walk_run_probes import probe_health, probe_rundir


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
        out.append(type(env.backend).__name__)  # where the simulator runs: in-process or served (env.<mode>.server)
    finally:
        env.close()
    out.append(files_under(video_root) if video_root.exists() else None)
    return out


def expert_episodes_of(base: RootConfig) -> list[Any]:
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
EXPERT: dict[str, Future] = {}


def expert_episodes() -> list[Any]:
    """The recorded expert episodes; the test starts recording in the background at its start."""
    if "future" not in EXPERT:
        EXPERT["future"] = ThreadPoolExecutor(1).submit(expert_episodes_of, load_in(()))
    return EXPERT["future"].result()


def probe_episode(cfg: RootConfig, path: str) -> Any:
    """Episodes that really end: the scripted expert's recorded actions replayed from its reset
    ids through make_env (success, terminations, auto-resets, metrics). The horizon is raised to
    cover the expert's episodes and two steps more; the env probe covers max_episode_steps."""
    from embodied_rl.envs import make_env

    mode = _env_mode(path)
    env_cfg = getattr(cfg.env, mode)
    if env_cfg.env_type != env_type_in((), "train"):
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
            rollout = (worker.env_ranks, worker.generators.seed,
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


_NAMESPACES = itertools.count()


def ray_cluster(c) -> Any:
    """The RayCluster of cluster settings `c`, kept while consecutive Ray probes ask for the same
    settings (a Ray session takes seconds to start); other settings get a fresh session, and
    any other probe ends it (config loading and planning read a running session's resources)."""
    import ray

    from embodied_rl.distributed.worker_group import RayCluster

    key = repr(dataclasses.asdict(c))
    if RAY_SESSION.get("key") != key:
        shutdown_ray()
        if ray.is_initialized():
            ray.shutdown()
        RAY_SESSION["cluster"] = RayCluster(address=c.address, num_nodes=c.num_nodes, num_cpu_slots=c.num_cpu_slots, wait_nodes_s=3.0)
        RAY_SESSION["key"] = key
    return RAY_SESSION["cluster"]


@functools.cache
def _base_cluster() -> Any:
    base = load_in(())
    assert not isinstance(base, Outcome), base.summary
    return base.cluster


def holds_session(c) -> bool:
    """Whether the walk's Ray session was started with cluster settings `c`."""
    return RAY_SESSION.get("key") == repr(dataclasses.asdict(c))


def end_ray_unless_base() -> None:
    """A Ray session of the walk base's cluster settings may stay for the next key's Ray probes:
    configs load the same with it (same slots). Any other goes."""
    if not holds_session(_base_cluster()):
        shutdown_ray()


def shutdown_ray() -> None:
    import ray

    RAY_SESSION.pop("key", None)
    cluster = RAY_SESSION.pop("cluster", None)
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
        for group in started:  # awaited together: the actors' processes start side by side
            group.ping().wait(120)
        return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == ns)
    finally:
        for group in started:
            group.shutdown()


PROBES: dict[str, Callable[[RootConfig, str], Any]] = {
    "algorithm": probe_algorithm, "plan": probe_plan, "rundir": probe_rundir, "model": probe_model,
    "env": probe_env, "actor": probe_actor, "ray": probe_ray, "subproc": probe_subproc,
    "names": probe_names, "episode": probe_episode, "health": probe_health,
}

# Consumers of each section, cheapest first (a key is routed by its longest matching prefix).
ROUTES: dict[str, tuple[str, ...]] = {
    "cluster": ("plan", "env", "ray"),
    "runner": ("rundir", "plan", "actor"),
    "runner.health": ("health",), "runner.save_best": ("health",),
    # Read by MetricsLogger and the run directory's checks only, not by the actor's update.
    "runner.logger": ("rundir", "plan"),
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
    "plugins": ("plan",),
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
    # actor.model, runner.logger, runner.health: sub-sections whose switches gate their own keys
    # (a wandb backend, a rollback action), not those of the rest of their section.
    return parts[0] if parts[0] not in ("actor", "runner") or len(parts) < 3 else ".".join(parts[:2])
