"""Ray session, resource slots and groups of Ray actors placed on them.

`RayCluster` starts Ray locally (or joins `cluster.address` / $RAY_ADDRESS), then reserves one
placement-group bundle per slot ({"GPU": 1, "CPU": Resources.cpus_per_slot} on GPU clusters,
{"CPU": 1} without GPUs), pinned to its slot's node (distributed/nodes.py). `WorkerGroup`
launches one actor per process of a component, each pinned to its slot's bundle with a
1/occupancy share of it, so collocated components fit (e.g. all three on slot 0 of a 2-core box).
"""
from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from embodied_rl.distributed.nodes import bundle_selectors, slot_nodes
from embodied_rl.distributed.placement import Placement, parse_component_placement
from embodied_rl.distributed.resources import (
    Resources,
    from_totals,
    local_cpu_count,
    ray_address,
)
from embodied_rl.distributed.traffic import TRAFFIC, payload_bytes
from embodied_rl.errors import ConfigError, UserError

log = logging.getLogger(__name__)
# No idle worker per CPU prestarted (Ray's default): ours carry a runtime_env those cannot serve.
RAY_SYSTEM_CONFIG: dict = {"prestart_worker_first_driver": False}
RAY_RUNTIME_ENV: dict = {"worker_process_setup_hook": "embodied_rl.heap.quiet"}  # workers start quiet (embodied_rl/heap.py)


class WorkerError(RuntimeError):
    """A worker of a group raised or died; the message names the group and rank. `died`: a
    worker process is gone (killed, out of memory, node lost), as opposed to code that raised."""

    def __init__(self, message: str, *, died: bool = False) -> None:
        super().__init__(message)
        self.died = died


class RayCluster:
    """The Ray session plus one reserved bundle per resource slot."""

    def __init__(
        self,
        *,
        address: str | None = None,
        num_nodes: int = 1,
        num_cpu_slots: int | None = None,
        resources: Resources | None = None,
        wait_nodes_s: float = 300.0,
        adopt_session: bool = False,
    ):
        """`resources`: the slots the config was validated against; Ray must offer exactly
        those (else a ConfigError), so nothing that was checked can change under the run.
        `adopt_session`: the running Ray session is one an earlier RayCluster of this run started
        and handed over (`shutdown(keep_session=True)`), so this one stops it in the end."""
        address = ray_address(address)
        self.started_ray = adopt_session and ray.is_initialized()
        self.pg = None
        if not ray.is_initialized():
            if address:
                context = ray.init(address=address, log_to_driver=True, runtime_env=RAY_RUNTIME_ENV)
            else:
                slots = num_cpu_slots or local_cpu_count()
                # "local": a new Ray of our own, never a cluster some `ray start` left on this machine
                context = ray.init(address="local", num_cpus=max(slots, local_cpu_count()), include_dashboard=False,
                                   log_to_driver=True, runtime_env=RAY_RUNTIME_ENV, _system_config=RAY_SYSTEM_CONFIG)
                self.started_ray = True
            # Where the workers' own logs and tracebacks are; also how this run's Ray processes
            # are told apart from other sessions' (their command lines name it).
            log.info("ray session: %s", context.address_info.get("session_dir"))
        self._wait_for_nodes(num_nodes, wait_nodes_s)
        total = ray.cluster_resources()
        found = from_totals(total.get("CPU", 0), total.get("GPU", 0), num_nodes=num_nodes, num_cpu_slots=num_cpu_slots,
                            source=f"Ray cluster at {address}" if address else "this machine")
        if resources is not None and (found.num_slots, found.accelerator) != (resources.num_slots, resources.accelerator):
            self.shutdown()
            raise ConfigError(f"the config was validated for {resources.describe()} but Ray now offers {found.describe()}; start again")
        if found.accelerator == "cpu" and total.get("CPU", 0) < found.num_slots:
            self.shutdown()
            raise ConfigError(
                f"cluster.num_cpu_slots={num_cpu_slots}: Ray has only {total.get('CPU', 0):g} CPUs; "
                "lower it or start Ray with more --num-cpus"
            )
        self.resources = found
        self.accelerator, self.num_slots = found.accelerator, found.num_slots
        self.num_nodes, self.slots_per_node, self.cpus_per_slot = num_nodes, found.slots_per_node, found.cpus_per_slot
        bundle = {"CPU": float(found.cpus_per_slot)} | ({"GPU": 1.0} if found.accelerator == "gpu" else {})
        try:
            self.slot_node_ids = slot_nodes(ray.nodes(), num_nodes, self.slots_per_node, bundle)
        except ConfigError:
            self.shutdown()
            raise
        self.pg = placement_group([dict(bundle) for _ in range(self.num_slots)], strategy="PACK",
                                  bundle_label_selector=bundle_selectors(self.slot_node_ids))
        if not self.pg.wait(timeout_seconds=wait_nodes_s):
            self.shutdown()
            raise ConfigError(f"could not reserve {self.num_slots} x {bundle} in Ray within {wait_nodes_s:.0f} s; are other jobs holding them?")

    @classmethod
    def from_config(cls, cluster_cfg: Any, resources: Resources | None = None, adopt_session: bool = False) -> RayCluster:
        return cls(
            address=cluster_cfg.address,
            num_nodes=cluster_cfg.num_nodes,
            num_cpu_slots=getattr(cluster_cfg, "num_cpu_slots", None),
            resources=resources,
            adopt_session=adopt_session,
        )

    def nodes_alive(self) -> bool:
        """Every node a slot is pinned to is still in the cluster (False if Ray cannot say)."""
        try:
            nodes = ray.nodes()
        except Exception:  # noqa: BLE001 - a session that cannot list its nodes is not one to keep
            return False
        return set(self.slot_node_ids) <= {n["NodeID"] for n in nodes if n.get("Alive")}

    @staticmethod
    def _wait_for_nodes(num_nodes: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            if alive >= num_nodes:
                return
            if time.monotonic() > deadline:
                raise ConfigError(f"cluster.num_nodes={num_nodes} but only {alive} Ray node(s) joined within {timeout_s:.0f} s")
            time.sleep(1.0)

    def placement(self, spec: Mapping[str, str | int]) -> Placement:
        """Parse `cluster.component_placement` against this cluster's slots."""
        return parse_component_placement(
            spec, num_slots=self.num_slots, slots_per_node=self.slots_per_node, accelerator=self.accelerator
        )

    def shutdown(self, keep_session: bool = False) -> None:
        """Release the slots, and stop Ray if this object started it, unless `keep_session`
        (a restart hands the session to the next RayCluster: `adopt_session`)."""
        if self.pg is not None:
            remove_placement_group(self.pg)
            self.pg = None
        if self.started_ray and not keep_session:
            ray.shutdown()


def gather_ranks(refs: Sequence[ray.ObjectRef], name: str, timeout: float | None = None, grace_s: float = 30.0) -> list[Any]:
    """Results of one call on every rank, in rank order.

    A rank's UserError (a config problem) surfaces as itself. Any other failure is a WorkerError
    that reports every rank: the first error is often a symptom (a peer closed the gloo
    connection) while the cause sits on a rank still running or dying, so after a failure the
    other ranks get `grace_s` seconds to finish or fail too."""
    refs = list(refs)
    pending, deadline, failed = refs, None if timeout is None else time.monotonic() + timeout, False
    while pending:
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
        if not ready:
            break
        try:
            ray.get(ready[0])
        except ray.exceptions.RayError:
            if not failed:
                failed, grace_end = True, time.monotonic() + grace_s
                deadline = grace_end if deadline is None else min(deadline, grace_end)
    if pending and not failed:
        raise WorkerError(f"{name}: {len(pending)} of {len(refs)} workers did not finish within {timeout} s")
    if not failed:
        results = ray.get(refs)
        TRAFFIC.received += payload_bytes(results)
        return results
    reports, first, died = [], None, False
    for rank, ref in enumerate(refs):
        if ref in pending:
            reports.append(f"rank {rank} still running {grace_s:.0f} s after the failure (blocked in a collective?)")
            continue
        try:
            ray.get(ref)
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, UserError):
                raise cause from err  # config problems surface as the one-line user error
            first = first or err
            reports.append(f"rank {rank} failed: {type(cause).__name__}: {_first_line(cause)}")
        except ray.exceptions.RayError as err:  # actor died, object lost, ...
            first, died = first or err, True
            reports.append(f"rank {rank} failed: {type(err).__name__}: {_first_line(err)}")
    raise WorkerError(f"{name} " + "; ".join(reports), died=died) from first


def _first_line(err: BaseException) -> str:
    """The report stays one line; the whole remote traceback is chained to the WorkerError."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else ""


def wait_together(calls: Sequence[GroupCall], timeout: float | None = None) -> list[list[Any]]:
    """Results of concurrent group calls (e.g. env workers stepping while rollout workers infer).
    A failure on any rank raises at once, with the failing group's report: its peers in the other
    groups may be blocked on its data and would otherwise wait for their channel timeout."""
    owner = {ref: call for call in calls for ref in call.refs}
    pending, deadline = list(owner), None if timeout is None else time.monotonic() + timeout
    results: dict[ray.ObjectRef, Any] = {}
    while pending:
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
        if not ready:
            raise WorkerError(f"{', '.join(c.group.name for c in calls)}: not finished within {timeout} s")
        try:
            results[ready[0]] = ray.get(ready[0])
        except ray.exceptions.RayError:
            owner[ready[0]].wait(grace_s=5.0)  # raises, naming every rank of the failing group
            raise
    TRAFFIC.received += payload_bytes(list(results.values()))
    return [[results[ref] for ref in call.refs] for call in calls]


class GroupCall:
    """One method call on every rank of a group: the futures, and `wait()` for the results."""

    def __init__(self, group: WorkerGroup, refs: list[ray.ObjectRef]) -> None:
        self.group, self.refs = group, refs

    def wait(self, timeout: float | None = None, grace_s: float = 30.0) -> list[Any]:
        """Results in rank order; an error names the group, rank and cause (`gather_ranks`)."""
        return gather_ranks(self.refs, self.group.name, timeout, grace_s)


class GroupMethod:
    """`group.<method>` of the workers' class: `group.train_step(batch)` calls it on every rank with
    the same arguments, `group.set_state.each(per_rank_args)` with one argument tuple per rank. The
    arguments are checked against the method's signature here, before anything is sent."""

    def __init__(self, group: WorkerGroup, name: str, signature: inspect.Signature) -> None:
        self.group, self.name, self.signature = group, name, signature

    def _check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        try:
            self.signature.bind(None, *args, **kwargs)  # None stands for self
        except TypeError as err:
            raise TypeError(f"{self.group.name}.{self.name}{self.signature}: {err}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> GroupCall:
        self._check(args, kwargs)
        TRAFFIC.sent += payload_bytes((args, kwargs)) * self.group.world_size
        return GroupCall(self.group, [getattr(w, self.name).remote(*args, **kwargs) for w in self.group.workers])

    def each(self, per_rank_args: Sequence[Sequence[Any]]) -> GroupCall:
        if len(per_rank_args) != self.group.world_size:
            raise ValueError(f"{self.group.name}.{self.name}: {len(per_rank_args)} argument tuples for "
                             f"{self.group.world_size} workers")
        for args in per_rank_args:
            self._check(args, {})
        TRAFFIC.sent += payload_bytes(per_rank_args)
        return GroupCall(self.group, [getattr(w, self.name).remote(*a) for w, a in zip(self.group.workers, per_rank_args)])


class WorkerGroup:
    """N Ray actors of one class, one per process of a placed component.

    Each actor is built with `cls(*args, rank=r, world_size=N, **kwargs, **rank_kwargs(r))`.
    The workers' public methods are the group's: `group.method(...)` returns a `GroupCall`.
    """

    def __init__(
        self,
        cls: type,
        cluster: RayCluster,
        placement: Placement,
        component: str,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        rank_kwargs: Callable[[int], Mapping[str, Any]] | None = None,
        env_vars: Mapping[str, str] | None = None,
        name: str | None = None,
        namespace: str | None = None,
        plugins: Sequence[str] = (),
    ):
        """`name`: the group's name; with `namespace`, actor r is the named Ray actor
        `<name>_<r>` there (what `ray list actors` and the dashboard show). `plugins`: modules
        each worker process imports before its worker is built (embodied_rl/plugins.py)."""
        where = placement[component]
        self.cls = cls
        self.name = name or cls.__name__
        self.world_size = where.num_processes
        remote_cls = ray.remote(_with_plugins(cls, tuple(plugins)))
        self.workers = []
        for rank, slot in enumerate(where.process_slots):
            share = 1.0 / placement.occupancy(slot)
            options: dict[str, Any] = {
                "num_cpus": share * cluster.cpus_per_slot,  # Ray sets the worker's OMP_NUM_THREADS from it (>= 1)
                "scheduling_strategy": PlacementGroupSchedulingStrategy(cluster.pg, placement_group_bundle_index=slot),
                "runtime_env": {"env_vars": {"EMBODIED_RL_SLOT": str(slot), **(env_vars or {})}},
            }
            if placement.accelerator == "gpu":
                options["num_gpus"] = share
            if namespace is not None:
                options.update(name=f"{self.name}_{rank}", namespace=namespace)
            kw = dict(kwargs or {}, rank=rank, world_size=self.world_size)
            kw.update(rank_kwargs(rank) if rank_kwargs else {})
            self.workers.append(remote_cls.options(**options).remote(*args, **kw))

    def __len__(self) -> int:
        return self.world_size

    def __getattr__(self, method: str) -> GroupMethod:
        fn = None if method.startswith("_") else getattr(self.__dict__.get("cls"), method, None)
        if not callable(fn):
            raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('name')}: its workers have no public method {method!r}")  # noqa: TRY004 - getattr protocol
        return GroupMethod(self, method, inspect.signature(fn))

    def node_ids(self, timeout: float | None = 60.0) -> list[str]:
        """The Ray node each rank runs on, asked of the actors themselves."""
        return self.gather([w.__ray_call__.remote(_node_id) for w in self.workers], timeout)

    def gather(self, refs: Sequence[ray.ObjectRef], timeout: float | None = None) -> list[Any]:
        """Results of `refs` in rank order (`gather_ranks`)."""
        return gather_ranks(refs, self.name, timeout)

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []


def _with_plugins(cls: type, plugins: tuple[str, ...]) -> type:
    """`cls` whose construction first imports `plugins` in the worker's process (a Ray actor is a
    fresh interpreter: the driver's imports, and so its registrations, are not there)."""
    if not plugins:
        return cls

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from embodied_rl.plugins import load_plugins

        load_plugins(plugins)
        cls.__init__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__qualname__": cls.__qualname__,
                                       "__module__": cls.__module__, "__doc__": cls.__doc__})


def _node_id(_worker: Any) -> str:
    return ray.get_runtime_context().get_node_id()
