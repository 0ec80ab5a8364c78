"""Memory a run needs per device, forecast from the config before anything starts.

What is forecast is each process's model state, exact in parameter counts (ParamCounts, from the
checkpoint's headers): an actor rank's fp32 master weights, gradients and Adam state per FSDP
shard, the all-gather working set of its compute dtype, and a rollout worker's policy copy and KL
reference; an actor rank's activations for one micro-batch, counted exactly by running the
policy's training forward on fake tensors (models/activations.py); and on CPU nodes, the freed
memory the C allocator keeps in an actor rank's heap (measured, cpu_heap_retention). The
Python/torch runtime of each process, the rollout's inference working set and the simulators are
not forecast, so a run under the forecast may still run out; one over it is refused before Ray
starts.

Devices: each GPU on GPU nodes (the processes placed on its slot); on CPU nodes, each node's
memory, shared by all its slots' processes. Capacity: `cluster.device_memory_gb` when set (to plan
for a machine you are not on), else read from this machine (a GPU's total memory, or RAM).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embodied_rl.errors import ConfigError
from embodied_rl.memory.params import ParamCounts

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig
    from embodied_rl.distributed.resources import Resources

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER_BYTES = 4  # the actor keeps fp32 master weights, gradients and optimizer state
ADAM_STATES = 2  # exp_avg and exp_avg_sq per trainable parameter
GIB = 1024 ** 3


@dataclass(frozen=True)
class ProcessForecast:
    """One process's forecast bytes by term; `host`: terms offloaded to CPU memory (FSDP cpu_offload);
    `setup`: a transient peak before the terms exist (actor rank 0 reading the whole policy)."""
    component: str
    rank: int
    device: str
    terms: dict[str, int]
    host: dict[str, int] = field(default_factory=dict)
    setup: int = 0

    @property
    def total(self) -> int:
        return max(sum(self.terms.values()), self.setup)


def _shard_factor(strategy: str, world: int) -> int:
    return 1 if strategy == "no_shard" else world


def actor_terms(counts: ParamCounts, *, world: int, strategy: str, param_dtype: str) -> dict[str, int]:
    """Model-state bytes of one actor rank (FSDP2): weights (fp32 masters of the trainable ones,
    frozen ones in the compute dtype), gradients and Adam state sharded over `world` ranks
    (replicated with no_shard), and the parameters gathered in the compute dtype: the root unit (which FSDP keeps gathered from the forward through the
    backward) with the block in use and the one prefetched (full_shard), or the whole model kept
    gathered between forward and backward (shard_grad_op, and no_shard in a compute dtype other
    than fp32)."""
    shard = _shard_factor(strategy, world)
    b = DTYPE_BYTES[param_dtype]
    if strategy == "full_shard":
        gathered = (counts.root_unit + 2 * counts.largest_unit) * b
    elif strategy == "shard_grad_op" or param_dtype != "fp32":
        gathered = counts.total * b
    else:
        gathered = 0
    frozen = counts.total - counts.trainable  # kept in the compute dtype (workers/actor/fsdp.py store_frozen_in)
    return {"weights": math.ceil((counts.trainable * MASTER_BYTES + frozen * b) / shard),
            "gradients": math.ceil(counts.trainable * MASTER_BYTES / shard),
            "optimizer": math.ceil(ADAM_STATES * counts.trainable * MASTER_BYTES / shard),
            "gathered": gathered}


def rank0_setup_bytes(counts: ParamCounts) -> int:
    """Actor rank 0's host peak while setting up: it reads the whole policy in fp32 before its
    frozen weights are cast and the shards are broadcast (workers/actor/fsdp.py
    build_sharded_policy); the checkpoint's file pages and load buffers come on top."""
    return counts.total * MASTER_BYTES


def cpu_heap_retention(terms: dict[str, int]) -> int:
    """What glibc's heap holds beyond the live tensors of a CPU actor rank in steady training.
    Each micro-batch frees its activations after its backward and the next one allocates them
    again in other places; the heap keeps the pages. Measured on the small preset (46M parameters:
    full and LoRA, fp32 and bf16, 1 and 2 ranks; benchmarks/memory_forecast.py), the peak RSS
    exceeded the live tensors by about two micro-batches' activations plus the gathered
    parameters (0.82-1.09x of the forecast with this term; LoRA in bf16 the lowest)."""
    return 2 * terms.get("activations", 0) + terms.get("gathered", 0)


def rollout_terms(counts: ParamCounts, *, precision: str, separate_reference: bool) -> dict[str, int]:
    """A rollout worker's policy in `precision`, and a frozen reference copy (without the value
    head) where the KL reference cannot share the policy's weights (no LoRA)."""
    b = DTYPE_BYTES[precision]
    terms = {"policy": counts.total * b}
    if separate_reference:
        terms["kl_reference"] = (counts.total - counts.groups.get("value_head", 0)) * b
    return terms


def device_capacity(cfg: RootConfig, resources: Resources) -> tuple[int | None, str]:
    """(bytes, where the number comes from); None when it cannot be read here."""
    if cfg.cluster.device_memory_gb is not None:
        return int(cfg.cluster.device_memory_gb * GIB), "cluster.device_memory_gb"
    if not resources.local:
        return None, f"memory of {resources.describe()} not given; set cluster.device_memory_gb"
    if resources.accelerator == "gpu":
        import torch

        if not torch.cuda.is_available():
            return None, "no GPU visible to this process; set cluster.device_memory_gb"
        return int(torch.cuda.get_device_properties(0).total_memory), "GPU 0 of this machine"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's RAM"


def _gib(n: int) -> str:
    return f"{n / GIB:.3g}"


@dataclass(frozen=True)
class MemoryPlan:
    processes: list[ProcessForecast]
    capacity: int | None
    capacity_source: str
    notes: list[str]
    #: What would lower the forecast, among the settings this config does not use yet.
    advice: tuple[str, ...] = ()

    def per_device(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.processes:
            out[p.device] = out.get(p.device, 0) + p.total
        return out

    def table(self) -> str:
        """The plan as text: per process its terms, per device the sum against the capacity."""
        gib = _gib
        lines = ["process          device     " + "forecast GiB (model states, actor activations; on CPUs the actor's heap)"]
        for p in self.processes:
            terms = ", ".join(f"{k} {gib(v)}" for k, v in p.terms.items())
            host = f"; offloaded to host: {', '.join(f'{k} {gib(v)}' for k, v in p.host.items())}" if p.host else ""
            setup = f"; set-up peak {gib(p.setup)}" if p.setup else ""
            lines.append(f"{p.component + ' ' + str(p.rank):<16} {p.device:<10} {gib(p.total)} ({terms}{host}{setup})")
        cap = f"{gib(self.capacity)} GiB ({self.capacity_source})" if self.capacity else f"unknown ({self.capacity_source})"
        for device, total in self.per_device().items():
            lines.append(f"{device}: {gib(total)} GiB of {cap}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def memory_plan(cfg: RootConfig, plan: RunPlan) -> MemoryPlan:
    """The forecast for a resolved config on the plan's slots (an actor rank's activations for one
    micro-batch counted by the model config, models/activations.py)."""
    from embodied_rl.config.plan import rolls_out, training_rl

    notes: list[str] = ["each process's Python/torch runtime, the rollout's inference working set and the simulators are not forecast"]
    counts = cfg.actor.model.parameter_counts()
    capacity, source = device_capacity(cfg, plan.resources)
    if counts is None:
        notes.insert(0, f"actor.model.model_path={cfg.actor.model.model_path}: no checkpoint to count yet (model_type "
                        f"{cfg.actor.model.model_type}; created at start from create_preset, or not countable): nothing forecast")
        return MemoryPlan([], capacity, source, notes)
    gpu = plan.resources.accelerator == "gpu"
    per_node = plan.resources.slots_per_node

    def device_of(slot: int) -> str:
        return f"GPU {slot}" if gpu else f"node {slot // per_node}"

    processes: list[ProcessForecast] = []
    fsdp = cfg.actor.fsdp_config
    if "actor" in plan.placement and not cfg.runner.only_eval:
        slots = plan.placement["actor"].process_slots
        terms = actor_terms(counts, world=len(slots), strategy=fsdp.sharding_strategy, param_dtype=fsdp.mixed_precision.param_dtype)
        mb = cfg.actor.micro_batch_size
        found = (cfg.actor.model.activation_bytes((cfg.env.train if rolls_out(cfg) else cfg.env.eval).task_configs("env")[0][1], mb, fsdp.mixed_precision.param_dtype)
                 if mb else "actor.micro_batch_size is derived at start")
        if isinstance(found, int):
            terms["activations"] = found
        else:
            notes.append(f"actor activations not forecast: {found}")
        if not gpu:
            terms["cpu_heap"] = cpu_heap_retention(terms)
            notes.append("cpu_heap: freed tensors the C allocator keeps in a CPU actor's heap, measured at about two "
                         "micro-batches' activations plus the gathered parameters (benchmarks/memory_forecast.py)")
        host = {}
        if fsdp.cpu_offload and gpu:
            host = {k: terms.pop(k) for k in ("weights", "gradients", "optimizer")}
        setup = rank0_setup_bytes(counts)
        if gpu:
            notes.append(f"actor rank 0 reads the whole policy in fp32 into host memory while setting up: {_gib(setup)} GiB of its node's RAM")
        else:
            notes.append("set-up peak: actor rank 0 reads the whole policy in fp32 before sharding it (its file pages come on top)")
        processes += [ProcessForecast("actor", r, device_of(s), dict(terms), host, setup if r == 0 and not gpu else 0)
                      for r, s in enumerate(slots)]
    if "rollout" in plan.placement:
        separate = training_rl(cfg) and (cfg.algorithm.kl_beta > 0 or cfg.algorithm.use_kl_loss) and not cfg.actor.model.is_lora
        terms = rollout_terms(counts, precision=cfg.actor.model.precision, separate_reference=separate)
        processes += [ProcessForecast("rollout", r, device_of(s), dict(terms))
                      for r, s in enumerate(plan.placement["rollout"].process_slots)]
    return MemoryPlan(processes, capacity, source, notes, _advice(cfg, gpu))


def _advice(cfg: RootConfig, gpu: bool) -> tuple[str, ...]:
    m, fsdp = cfg.actor.model, cfg.actor.fsdp_config
    out = []
    if not m.is_lora:
        out.append("LoRA (actor.model.is_lora)")
    if fsdp.mixed_precision.param_dtype == "fp32" or m.precision == "fp32":
        out.append("bf16 (actor.model.precision, actor.fsdp_config.mixed_precision.param_dtype)")
    if not m.gradient_checkpointing:
        out.append("gradient checkpointing (actor.model.gradient_checkpointing)")
    out.append("more actor ranks to shard over")
    if gpu and not fsdp.cpu_offload:
        out.append("offload (actor.fsdp_config.cpu_offload)")
    return (*out, "a larger device")


def check_fits(mp: MemoryPlan) -> None:
    """ConfigError naming the fullest device, its forecast and largest terms, when a device's
    forecast exceeds its capacity."""
    if mp.capacity is None:
        return
    for device, total in sorted(mp.per_device().items(), key=lambda kv: -kv[1]):
        if total <= mp.capacity:
            return
        terms: dict[str, int] = {}
        for p in mp.processes:
            if p.device == device:
                for k, v in p.terms.items():
                    terms[f"{p.component} {k}"] = terms.get(f"{p.component} {k}", 0) + v
        top = ", ".join(f"{k} {_gib(v)}" for k, v in sorted(terms.items(), key=lambda kv: -kv[1])[:3])
        raise ConfigError(f"{device} needs {_gib(total)} GiB by the memory plan (largest: {top} GiB), more than its "
                          f"{_gib(mp.capacity)} GiB ({mp.capacity_source}); what lowers it: {', '.join(mp.advice or ('a larger device',))} "
                          "(`embodied-rl plan` shows the table)")
