"""The resource slots a run will have, known before any worker starts.

Placement ranks, the number of env/rollout/actor processes and every size derived from them
depend on how many slots the cluster offers. A slot is one GPU, or on nodes without GPUs one
CPU worker slot (`cluster.num_cpu_slots` per node, default: the node's CPU count). Locally the
count comes from this machine exactly as Ray will see it when the runtime starts it; with
`cluster.address` (or $RAY_ADDRESS) the driver joins the running cluster and reads Ray's own
resource table, which starts no process.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from embodied_rl.errors import ConfigError

ACCELERATORS = ("cpu", "gpu")


@dataclass(frozen=True)
class Resources:
    num_nodes: int
    slots_per_node: int
    accelerator: str  # "cpu" | "gpu"
    source: str = "given"  # for messages: where the numbers come from
    #: Read from this machine or its Ray session, so this machine's RAM is a CPU slot's memory;
    #: False for a machine described by the caller (planning for a machine you are not on).
    local: bool = False
    #: CPUs reserved with each slot: 1 for a CPU slot; a GPU node's CPUs split evenly over its GPUs
    #: (at least 1), so the processes of a GPU slot get the node's cores for their threads (image
    #: resizing, advantages): Ray sets a worker's OMP_NUM_THREADS from its CPU share.
    cpus_per_slot: int = 1

    def __post_init__(self) -> None:
        if self.accelerator not in ACCELERATORS:
            raise ValueError(f"accelerator must be one of {ACCELERATORS}, got {self.accelerator!r}")
        if self.num_nodes < 1 or self.slots_per_node < 1:
            raise ValueError(f"need >= 1 node and slot, got {self.num_nodes} x {self.slots_per_node}")

    @property
    def num_slots(self) -> int:
        return self.num_nodes * self.slots_per_node

    def describe(self) -> str:
        unit = "GPU" if self.accelerator == "gpu" else "CPU slot"
        return f"{self.num_slots} {unit}s on {self.num_nodes} node(s) ({self.source})"


def ray_address(address: str | None) -> str | None:
    return address or os.environ.get("RAY_ADDRESS") or None


def local_cpu_count() -> int:
    return os.cpu_count() or 1


def local_gpu_count() -> int:
    """CUDA devices of this machine; torch is imported only where an NVIDIA driver exists."""
    if shutil.which("nvidia-smi") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def from_totals(total_cpus: float, total_gpus: float, *, num_nodes: int, num_cpu_slots: int | None, source: str,
                local: bool = False) -> Resources:
    """Slots from a cluster's resource totals (Ray's table, or this machine's counts)."""
    gpus = int(total_gpus)
    if gpus:
        if gpus % num_nodes:
            raise ConfigError(f"cluster.num_nodes={num_nodes}: {gpus} GPUs ({source}) do not split evenly over the nodes")
        return Resources(num_nodes, gpus // num_nodes, "gpu", source, local, cpus_per_slot=max(1, int(total_cpus) // gpus))
    per_node = num_cpu_slots or max(1, int(total_cpus) // num_nodes)
    if num_cpu_slots is not None and num_cpu_slots < 1:
        raise ConfigError(f"cluster.num_cpu_slots={num_cpu_slots} must be >= 1, or null for the CPU count")
    return Resources(num_nodes, per_node, "cpu", source, local)


def detect_resources(cluster_cfg) -> Resources:
    """The slots the runtime will reserve for this cluster config (see module docstring)."""
    if cluster_cfg.num_nodes < 1:
        raise ConfigError(f"cluster.num_nodes: must be >= 1, got {cluster_cfg.num_nodes}")
    address = ray_address(cluster_cfg.address)
    if address is None and _ray_running_here():
        return _joined_cluster("(this process's Ray session)", cluster_cfg)
    if address is None:
        if cluster_cfg.num_nodes > 1:
            raise ConfigError(
                f"cluster.num_nodes={cluster_cfg.num_nodes} needs a running Ray cluster: start it with `ray start` "
                "on each node and set cluster.address=<head>:6379 (or $RAY_ADDRESS)"
            )
        return from_totals(local_cpu_count(), local_gpu_count(), num_nodes=1,
                           num_cpu_slots=cluster_cfg.num_cpu_slots, source="this machine", local=True)
    return _joined_cluster(address, cluster_cfg)


def _ray_running_here() -> bool:
    """A Ray session this process already joined (an embedding program or a test) is the cluster."""
    import sys

    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def _joined_cluster(address: str, cluster_cfg) -> Resources:
    import ray

    if not ray.is_initialized():
        host, _, port = address.rpartition(":")
        if address != "auto" and not (host and port.isdigit()):
            raise ConfigError(f"cluster.address={address}: expected host:port of a Ray head node (e.g. 10.0.0.1:6379), or auto")
        try:
            ray.init(address=address, log_to_driver=True)
        except (ConnectionError, ValueError) as err:
            raise ConfigError(f"cluster.address={address}: no Ray cluster answers there ({str(err).splitlines()[0]}); start one with `ray start --head`") from err
    total = ray.cluster_resources()
    return from_totals(total.get("CPU", 0), total.get("GPU", 0), num_nodes=cluster_cfg.num_nodes,
                       num_cpu_slots=cluster_cfg.num_cpu_slots, source=f"Ray cluster at {address}", local=True)


__all__ = ["Resources", "detect_resources", "from_totals", "ray_address"]
