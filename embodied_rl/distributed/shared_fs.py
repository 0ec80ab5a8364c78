"""A run across nodes writes and reads files on every node (checkpoints from actor rank 0,
videos from the env workers, the model on each rollout and actor worker) under the paths its
config names. That only works when those paths are one filesystem for all nodes (NFS, a
cluster file system mounted at the same path). Checked once at start of a run on a cluster
it joined, before any worker: the driver leaves a nonce in every directory the workers write
to, and a task on each node must read the nonce back, write beside it, and find every model
and data path. (A Ray the driver starts itself runs its workers in the driver's directory
on the driver's machine: nothing to check.)
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from embodied_rl.errors import ConfigError

MARKER = ".embodied_rl-shared-check-{nonce}"


@dataclass(frozen=True)
class NodeView:
    """What one node sees: per written directory, whether the driver's nonce is there and
    whether it can write; per read path, whether it exists."""

    node_id: str
    nonce_seen: dict[str, bool] = field(default_factory=dict)
    writable: dict[str, bool] = field(default_factory=dict)
    exists: dict[str, bool] = field(default_factory=dict)


def look(node_id: str, nonce: str, write_dirs: Mapping[str, str], read_paths: Mapping[str, str]) -> NodeView:
    """The probe itself (runs on the node being checked)."""
    seen, writable = {}, {}
    for key, path in write_dirs.items():
        marker = Path(path) / MARKER.format(nonce=nonce)
        seen[key] = marker.is_file() and marker.read_text() == nonce
        probe = Path(path) / f"{marker.name}.{node_id[:8]}"
        try:
            probe.write_text(node_id)
            probe.unlink()
            writable[key] = True
        except OSError:
            writable[key] = False
    return NodeView(node_id, seen, writable, {key: os.path.exists(p) for key, p in read_paths.items()})


def problems(views: Sequence[NodeView], write_dirs: Mapping[str, str], read_paths: Mapping[str, str]) -> list[str]:
    """One line per (key, node) that does not see what the driver sees."""
    out = []
    for view in views:
        node = view.node_id[:8]
        for key, path in write_dirs.items():
            if not view.nonce_seen.get(key):
                out.append(f"{key}={path} is not the same directory on node {node} as on the driver")
            elif not view.writable.get(key):
                out.append(f"{key}={path} is not writable from node {node}")
        out.extend(f"{key}={path} does not exist on node {node}" for key, path in read_paths.items()
                   if not view.exists.get(key))
    return out


@ray.remote(num_cpus=0)
def _look_remote(nonce: str, write_dirs: dict[str, str], read_paths: dict[str, str]) -> NodeView:
    return look(ray.get_runtime_context().get_node_id(), nonce, write_dirs, read_paths)


def check_shared_paths(node_ids: Sequence[str], write_dirs: Mapping[str, str], read_paths: Mapping[str, str],
                       timeout_s: float = 120.0) -> None:
    """ConfigError naming the first key and node whose workers do not see the driver's files.
    Every node is asked, the driver's own included: its workers were started by a raylet that
    may run in another working directory (what a relative path resolves against)."""
    nonce = uuid.uuid4().hex
    markers = []
    try:
        for path in write_dirs.values():
            Path(path).mkdir(parents=True, exist_ok=True)
            markers.append(Path(path) / MARKER.format(nonce=nonce))
            markers[-1].write_text(nonce)
        refs = [_look_remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                .remote(nonce, dict(write_dirs), dict(read_paths)) for node in dict.fromkeys(node_ids)]
        views = ray.get(refs, timeout=timeout_s)
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)
    found = problems(views, write_dirs, read_paths)
    if found:
        relative = any(not os.path.isabs(p) for p in (*write_dirs.values(), *read_paths.values()))
        hint = ("give absolute paths (a relative one is resolved in each worker's working directory) on a filesystem"
                if relative else "put them on a filesystem")
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(f"{found[0]}{more}: the workers of a run on a Ray cluster read and write these paths; "
                          f"{hint} every node mounts at the same path (e.g. NFS)")
