"""Builds the three worker groups of a run from the config (env, rollout, actor).

Kept apart from the training loop so the loop reads as the algorithm: rollout ->
advantages -> update -> weight sync. All placement and wiring decisions live here.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from embodied_rl import heap
from embodied_rl.config.plan import RunPlan, plan_run, training_rl, used_modes
from embodied_rl.config.schema import RootConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.placement import Placement
from embodied_rl.distributed.resources import detect_resources
from embodied_rl.distributed.shared_fs import check_shared_paths
from embodied_rl.distributed.shm import sweep
from embodied_rl.distributed.worker_group import RayCluster, WorkerError, WorkerGroup
from embodied_rl.envs.service.shared_images import run_prefix
from embodied_rl.process_env import RUN_TAG
from embodied_rl.workers.protocol import ChannelWiring, SamplingSpec

SETUP_TIMEOUT_S = 900.0
PLACEMENT_FILE = "placement.json"
# Every worker process carries RUN_TAG=<run name, first RUN_TAG_CHARS characters>-<id>, so the
# processes of one run can be told apart (ps, a crash report, a kill test): run_worker_pids.
RUN_TAG_CHARS = 16
log = logging.getLogger(__name__)


def sampling_specs(cfg: RootConfig) -> dict[str, SamplingSpec]:
    """The rollout workers' sampling specs: "train", then one per evaluation scoring
    (algorithm.sampling_params.eval_scoring, in its order): "greedy" (the most likely action)
    and "sampled" (drawn as training rollouts draw, at temperature_eval)."""
    sp = cfg.algorithm.sampling_params
    evals = {"greedy": SamplingSpec(do_sample=False, temperature=1.0),  # the most likely action: temperature cannot change it
             "sampled": SamplingSpec(do_sample=True, temperature=sp.temperature_eval)}
    return {"train": SamplingSpec(do_sample=sp.do_sample, temperature=sp.temperature_train),
            **{name: evals[name] for name in sp.eval_scoring}}


@dataclass
class Groups:
    cluster: RayCluster
    placement: Placement
    wiring: ChannelWiring
    env: WorkerGroup
    rollout: WorkerGroup
    actor: WorkerGroup | None
    run_id: str

    def placement_facts(self) -> dict:
        """Where every rank runs: its slot, the node the slot is pinned to and the node the
        actor reports (the two agree unless Ray broke the pin)."""
        slots = self.cluster.slot_node_ids
        out: dict = {"slot_nodes": slots, "components": {}}
        for name, group in (("env", self.env), ("rollout", self.rollout), ("actor", self.actor)):
            if group is None:
                continue
            where = self.placement[name].process_slots
            out["components"][name] = [{"rank": r, "slot": slot, "slot_node": slots[slot], "node": node}
                                       for r, (slot, node) in enumerate(zip(where, group.node_ids(), strict=True))]
        return out

    def record_placement(self, run_dir: Path) -> None:
        """Write placement.json and log each component's nodes; a rank that runs on another
        node than its slot's is an error (the slot -> node map would be false)."""
        facts = self.placement_facts()
        path = run_dir / PLACEMENT_FILE
        path.write_text(json.dumps(facts, indent=1) + "\n")
        nodes = list(dict.fromkeys(facts["slot_nodes"]))
        for name, ranks in facts["components"].items():
            moved = [r["rank"] for r in ranks if r["node"] != r["slot_node"]]
            if moved:
                raise WorkerError(f"{name} ranks {moved} run on another node than their slot's; see {path}")
            log.info("%s ranks on nodes %s (node 0 = %s)", name, [nodes.index(r["node"]) for r in ranks], nodes[0][:8])

    def shutdown(self, keep_session: bool = False) -> None:
        """Stop every worker and channel and release the slots; `keep_session` leaves the Ray
        session running for the groups of a restart (RayCluster.shutdown)."""
        for group in (self.env, self.rollout, self.actor):
            if group is not None:
                group.shutdown()
        for channel in {id(c): c for c in (self.wiring.obs, self.wiring.actions)}.values():
            channel.shutdown()
        sweep(run_prefix(self.run_id))  # what env servers of dead env workers on this host left
        self.cluster.shutdown(keep_session=keep_session)


def build_groups(cfg: RootConfig, *, with_actor: bool, run_name: str, video_dirs: dict[str, str],
                 first_mode: str | None = "train", adopt_session: bool = False) -> Groups:
    """Start the groups on the slots the config was validated against (Ray must offer exactly
    those); Ray actors are named <group_name>_<rank> in a namespace of their own per run.
    `first_mode`: the env mode the runner steps first, whose sub-envs start with the workers
    (None: at the first interact; benchmarks/start_up.py compares the two).
    `adopt_session`: see RayCluster."""
    cluster = RayCluster.from_config(cfg.cluster, detect_resources(cfg.cluster), adopt_session=adopt_session)
    try:
        if not cluster.started_ray:
            check_shared_paths(cluster.slot_node_ids, *shared_paths(cfg, with_actor=with_actor))
        plan: RunPlan = plan_run(cfg, cluster.resources)
        placement = plan.placement
        run_id = f"{run_name[:RUN_TAG_CHARS]}-{uuid.uuid4().hex[:6]}"
        wiring = _wiring(cfg, run_id=run_id)
        n_env, n_rollout = plan.env_workers, plan.rollout_workers
        named = {"namespace": f"embodied_rl-{run_id}", "env_vars": {RUN_TAG: run_id}, "plugins": cfg.plugins}
        rollout_model = dataclasses.replace(cfg.actor.model, model_path=cfg.rollout.model.model_path)
        # Rollout workers register their consumer keys in __init__, before env workers send.
        rollout = WorkerGroup(
            _rollout_cls(), cluster, placement, "rollout", name=cfg.rollout.group_name, **named,
            args=(rollout_model, wiring),
            kwargs=rollout_worker_kwargs(cfg, n_env),
        )
        # The actor and env processes start while the rollout workers build their policies:
        # their constructors touch no channel, and the env workers build their first mode's
        # sub-envs (simulator imports, first render) then, but send nothing until the runner's
        # first interact, which comes after the barrier below.
        actor = (WorkerGroup(_actor_cls(), cluster, placement, "actor", name=cfg.actor.group_name, args=(cfg,), **named)
                 if with_actor else None)
        env_cfgs = {mode: getattr(cfg.env, mode) for mode in used_modes(cfg)}
        env = WorkerGroup(
            _env_cls(), cluster, placement, "env", name=cfg.env.group_name, **named,
            args=(env_cfgs, wiring),
            kwargs={"num_rollout_workers": n_rollout, "pipeline_stage_num": cfg.rollout.pipeline_stage_num,
                    "video_dirs": video_dirs, "run_name": run_name},
        )
        env_built = env.build(first_mode) if first_mode else None
        # The actor ranks' set-up (process group, policy, optimizer) needs nothing of the rollout
        # workers: it runs while they build their policies, not after.
        actor_ready = None
        if actor is not None:
            addr, port = ray.get(actor.workers[0].get_master_address.remote())
            actor_ready = actor.setup(addr, port)
        rollout.get_rng_state().wait(SETUP_TIMEOUT_S)  # barrier: consumers registered
        for pending in (actor_ready, env_built):
            if pending is not None:
                pending.wait(SETUP_TIMEOUT_S)
        # Start-up is over in every process of the run: each settles its heap (embodied_rl/heap.py).
        settling = [(g, [w.__ray_call__.remote(heap.settle_worker) for w in g.workers]) for g in (env, rollout, actor) if g is not None]
        heap.settle()
        for group, refs in settling:
            group.gather(refs, SETUP_TIMEOUT_S)
        return Groups(cluster, placement, wiring, env, rollout, actor, run_id)
    except BaseException:
        cluster.shutdown()
        raise


def rollout_worker_kwargs(cfg: RootConfig, num_env_workers: int) -> dict[str, Any]:
    """RolloutWorker's keyword arguments from the config (besides rank and world size)."""
    return {"num_env_workers": num_env_workers, "pipeline_stage_num": cfg.rollout.pipeline_stage_num,
            "sampling": sampling_specs(cfg), "compute_values": cfg.algorithm.uses_critic,
            "enable_offload": cfg.rollout.enable_offload, "seed": cfg.runner.seed,
            "compute_ref_logprobs": needs_reference(cfg), "backend": cfg.rollout.backend,
            "gpu_memory_utilization": cfg.rollout.gpu_memory_utilization}


def shared_paths(cfg: RootConfig, *, with_actor: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(directories workers write to, paths workers read), by config key: what every node of a
    run across nodes must see as the driver does."""
    write = {"runner.logger.log_path": cfg.runner.logger.log_path}
    write |= {f"env.{mode}.video_cfg.video_base_dir": getattr(cfg.env, mode).video_cfg.video_base_dir
              for mode in used_modes(cfg) if getattr(cfg.env, mode).video_cfg.save_video}
    read = {"rollout.model.model_path": cfg.rollout.model.model_path}
    if with_actor:
        read["actor.model.model_path"] = cfg.actor.model.model_path
        read |= {f"data.train_data_paths[{i}]": p for i, p in enumerate(cfg.data.train_data_paths)}
    return write, read


def needs_reference(cfg: RootConfig) -> bool:
    """KL to the reference policy (reward shaping or loss term) needs its log-probs at rollout."""
    return training_rl(cfg) and (cfg.algorithm.kl_beta > 0 or cfg.algorithm.use_kl_loss)


def _wiring(cfg: RootConfig, run_id: str) -> ChannelWiring:
    """One channel per direction, each from its own config section (name, queue, bound); both
    keep their queues in one queue actor."""
    obs = Channel.create(cfg.env.channel.name, queue_size=cfg.env.channel.queue_size, run_id=f"{run_id}-obs")
    actions = Channel.create(cfg.rollout.channel.name, queue_size=cfg.rollout.channel.queue_size, run_id=f"{run_id}-actions", host=obs)
    return ChannelWiring(obs=obs, actions=actions, obs_queue=cfg.env.channel.queue_name, action_queue=cfg.rollout.channel.queue_name)


# Imported lazily so `embodied-rl print-config` and friends never import torch/ray workers.
def _env_cls():
    from embodied_rl.workers.env_worker import EnvWorker

    return EnvWorker


def _rollout_cls():
    from embodied_rl.workers.rollout_worker import RolloutWorker

    return RolloutWorker


def _actor_cls():
    from embodied_rl.workers.actor.worker import ActorWorker

    return ActorWorker


def run_worker_pids(run_name: str, cls: str) -> list[int]:
    """PIDs of run `run_name`'s worker processes of class `cls` on this machine (Linux /proc): Ray
    titles a worker `ray::<class>` when idle and `ray::<actor name>:<class>.<method>` when busy."""
    title = re.compile(rf"ray::([\w-]+:)?{re.escape(cls)}(\.|$)")
    tag = f"{RUN_TAG}={run_name[:RUN_TAG_CHARS]}-".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if title.match(argv0) and any(e.startswith(tag) for e in environ):
            found.append(int(proc.name))
    return sorted(found)
