"""`cluster.component_placement`: which resource slots each component's processes run on.

Syntax (RLinf's): each entry maps comma-joined component names to ranks,
    actor,env,rollout: all          # collocated: every component on every slot
    env: 0-1                        # disaggregated ...
    rollout: 2-3                    # ... (hybrid layouts mix both)
    env: 0-1:0-3                    # resource ranks ':' process ranks: 4 env processes on 2 slots
Ranks are 'all', '3', '0,2,3', '0-3', '0-3,5'. A slot is one GPU, or on a machine without
GPUs one CPU worker slot (`cluster.num_cpu_slots` per node, default: the node's CPU cores).
Slot r lives on node r // slots_per_node (distributed/nodes.py pins it there). A component gets one process per listed slot unless
process ranks are given; processes are spread evenly over the slots in order.
Components may share slots (collocation); a slot's processes split its resources equally.
On GPUs an actor rank, and a vLLM rollout engine, needs a GPU of its own: two of one component
on one GPU are refused at config load (workers/checks.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from embodied_rl.errors import ConfigError

KEY = "cluster.component_placement"
COMPONENTS = ("actor", "env", "rollout")


@dataclass(frozen=True)
class ComponentPlacement:
    """Slots of one component and the slot of each of its processes (index = process rank)."""

    name: str
    slots: tuple[int, ...]
    process_slots: tuple[int, ...]

    @property
    def num_processes(self) -> int:
        return len(self.process_slots)

    def shared_slots(self) -> dict[int, tuple[int, ...]]:
        """Slots holding more than one of this component's processes -> their process ranks."""
        ranks: dict[int, list[int]] = {}
        for rank, slot in enumerate(self.process_slots):
            ranks.setdefault(slot, []).append(rank)
        return {slot: tuple(r) for slot, r in ranks.items() if len(r) > 1}


@dataclass(frozen=True)
class Placement:
    num_slots: int
    slots_per_node: int
    accelerator: str  # "gpu" | "cpu"
    components: dict[str, ComponentPlacement] = field(default_factory=dict)

    def __getitem__(self, name: str) -> ComponentPlacement:
        if name not in self.components:
            raise ConfigError(f"{KEY} has no entry for {name!r}; add e.g. '{name}: all'")
        return self.components[name]

    def __contains__(self, name: str) -> bool:
        return name in self.components

    def occupancy(self, slot: int) -> int:
        """Processes of all components placed on `slot` (they share its resources)."""
        return sum(c.process_slots.count(slot) for c in self.components.values())

    def node_of(self, slot: int) -> int:
        return slot // self.slots_per_node

    def describe_slot(self, slot: int) -> str:
        """The slot as a user finds it: 'GPU 5', or on several nodes 'GPU 5 (node 1, local GPU 1)'."""
        unit = "GPU" if self.accelerator == "gpu" else "CPU slot"
        if self.num_slots == self.slots_per_node:
            return f"{unit} {slot}"
        return f"{unit} {slot} (node {self.node_of(slot)}, local {unit} {slot % self.slots_per_node})"


def entry_of(spec: Mapping[str, str | int], name: str) -> str:
    """The key of `spec` (a component_placement mapping) that places component `name`."""
    for key in spec:
        if name in (n.strip() for n in str(key).split(",")):
            return str(key)
    raise ConfigError(f"{KEY} has no entry for {name!r}; add e.g. '{name}: all'")


def format_ranks(ranks: tuple[int, ...] | list[int]) -> str:
    """Sorted ranks back in placement syntax: '0-3', '0,2,5-7'."""
    parts: list[str] = []
    for r in sorted(ranks):
        if parts and r == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ",".join(parts)


def parse_ranks(text: str | int, limit: int, where: str) -> list[int]:
    """'all' | '3' | '0,2,3' | '0-3' | '0-3,5' -> sorted distinct ranks, each in [0, limit)."""
    if isinstance(text, bool):
        raise ConfigError(f"{where}: expected ranks like 'all', '0-3' or '0,2', got {text!r}")
    text = str(text).strip()
    if text == "all":
        return list(range(limit))
    ranks: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ConfigError(f"{where}: bad rank {part!r} in {text!r}; use 'all', 'N', 'A-B' or a comma list") from None
        if a < 0 or b < a:
            raise ConfigError(f"{where}: bad range {part!r} in {text!r}; need 0 <= A <= B")
        if b >= limit:
            raise ConfigError(f"{where}: rank {b} out of range, only {limit} slots exist (0-{limit - 1})")
        ranks.extend(range(a, b + 1))
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"{where}: rank listed twice in {text!r}")
    return sorted(ranks)


def _parse_value(value: str | int, num_slots: int, where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    text = str(value).strip()
    res_text, sep, proc_text = text.partition(":")
    slots = parse_ranks(res_text, num_slots, where)
    if not sep:
        return tuple(slots), tuple(slots)
    procs = parse_ranks(proc_text, 1 << 20, where)
    if procs != list(range(len(procs))):
        raise ConfigError(f"{where}: process ranks {proc_text!r} must be 0-(N-1), e.g. '0-{len(procs) - 1}'")
    if len(procs) < len(slots):
        raise ConfigError(f"{where}: {len(procs)} processes for {len(slots)} slots; need at least one per slot")
    # Even spread in order: process p goes to slot p * S // P.
    return tuple(slots), tuple(slots[p * len(slots) // len(procs)] for p in range(len(procs)))


def parse_component_placement(
    spec: Mapping[str, str | int],
    *,
    num_slots: int,
    slots_per_node: int | None = None,
    accelerator: str = "cpu",
    components: tuple[str, ...] = COMPONENTS,
) -> Placement:
    """Parse a placement mapping (see module docstring); raises ConfigError naming the key."""
    if num_slots < 1:
        raise ConfigError(f"{KEY}: no resource slots available (got {num_slots}); check cluster.num_cpu_slots / GPUs")
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError(f"{KEY} must be a non-empty mapping like {{'actor,env,rollout': 'all'}}, got {spec!r}")
    parsed: dict[str, ComponentPlacement] = {}
    for key, value in spec.items():
        where = f"{KEY}.{key}"
        names = [n.strip() for n in str(key).split(",")]
        for name in names:
            if name not in components:
                raise ConfigError(f"{where}: unknown component {name!r}; valid: {', '.join(components)}")
            if name in parsed:
                raise ConfigError(f"{where}: component {name!r} is placed twice; list it in one entry only")
        slots, process_slots = _parse_value(value, num_slots, where)
        for name in names:
            parsed[name] = ComponentPlacement(name, slots, process_slots)
    per_node = slots_per_node or num_slots
    if num_slots % per_node:
        raise ConfigError(f"{KEY}: {num_slots} slots do not split into nodes of {per_node}")
    return Placement(num_slots, per_node, accelerator, parsed)


def envs_per_worker(total_num_envs: int | None, num_env_workers: int, stages: int, mode: str) -> int:
    """Sub-envs per stage of one env worker; a ConfigError names the keys when they do not divide."""
    if not total_num_envs or total_num_envs < 1:
        raise ConfigError(f"env.{mode}.total_num_envs must be set to a positive number, got {total_num_envs}")
    if stages < 1:
        raise ConfigError(f"rollout.pipeline_stage_num must be >= 1, got {stages}")
    if total_num_envs % (num_env_workers * stages):
        raise ConfigError(
            f"env.{mode}.total_num_envs={total_num_envs} must be a multiple of env workers ({num_env_workers}, "
            f"from cluster.component_placement) x rollout.pipeline_stage_num ({stages}); or set it null to derive it"
        )
    return total_num_envs // (num_env_workers * stages)


def rollout_rank_of(env_rank: int, num_env_workers: int, num_rollout_workers: int) -> int:
    """Rollout worker serving an env worker: consecutive env ranks share one rollout worker."""
    if num_env_workers % num_rollout_workers:
        raise ConfigError(
            f"cluster.component_placement: {num_env_workers} env processes must be a multiple of "
            f"{num_rollout_workers} rollout processes (each rollout worker serves whole env workers)"
        )
    return env_rank // (num_env_workers // num_rollout_workers)
