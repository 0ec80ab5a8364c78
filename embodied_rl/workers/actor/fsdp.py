"""torch.distributed set-up and FSDP2 (`fully_shard`) wrapping of a policy.

Keys: `actor.fsdp_config.*` (schema/runtime.py::FSDPConfig). gloo on CPU; on GPU NCCL for CUDA
tensors and gloo for CPU ones (`process_group_backend`).

Sharding units: the policy names them with `fsdp_units()` (the model folder knows its
decoder layers, ViT blocks, projector and value head). The root is sharded last and holds
whatever is left. `BasePolicy.predict/evaluate_actions` go through `forward`, so FSDP's
hooks gather the parameters around them.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from embodied_rl.errors import ConfigError
from embodied_rl.models.registry import (
    PRECISION_DTYPES,
    build_policy,
    policy_class,
)


def free_port() -> int:
    """A TCP port that is free on this host right now (rank 0 publishes it to the others)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def host_ip() -> str:
    """This host's address as other hosts of the cluster reach it (loopback on a lone box)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:  # pragma: no cover - ray is a hard dependency
        pass
    return "127.0.0.1"


def actor_device() -> torch.device:
    """cuda:<local device> when this process sees a GPU, else cpu (Ray sets CUDA_VISIBLE_DEVICES)."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def process_group_backend(device: torch.device) -> str:
    """torch.distributed backend of the actor's group for a rank training on `device`.

    On a GPU the group needs a CPU backend beside NCCL: with `cpu_offload` the shards, their
    gradients and gradient norms are CPU tensors, and the weight gather and gradient clipping
    run collectives on them (object collectives and barriers go to the CPU
    backend too)."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def init_process_group(rank: int, world_size: int, master_addr: str, master_port: int, device: torch.device, timeout_s: float = 600.0) -> None:
    """Join the actor's process group (`process_group_backend`)."""
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialised in this process; one ActorWorker per process")
    backend = process_group_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL binds each rank to its device
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master_addr, str(master_port)
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s), init_method=f"tcp://{master_addr}:{master_port}")


def check_precision(fsdp_cfg, device: torch.device) -> tuple[torch.dtype, torch.dtype]:
    """(param, reduce) dtypes, rejecting bf16 on a GPU without it (known only on the worker's device).

    There is no buffer dtype: the policy's only float buffers are RoPE frequencies, which must
    stay fp32 (as in transformers); a bf16 copy would shift every position's rotation angle."""
    mp = fsdp_cfg.mixed_precision
    names = {"param_dtype": mp.param_dtype, "reduce_dtype": mp.reduce_dtype}
    for key, name in names.items():  # the names themselves are checked at config load (Literal types)
        if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"actor.fsdp_config.mixed_precision.{key}=bf16 is not supported by {torch.cuda.get_device_name()}; use fp32")
    return PRECISION_DTYPES[mp.param_dtype], PRECISION_DTYPES[mp.reduce_dtype]


def device_mesh(fsdp_cfg, world_size: int, device: torch.device) -> DeviceMesh:
    """1-D mesh for sharding; `no_shard` uses a (replicate=world, shard=1) mesh, i.e. DDP via HSDP."""
    if fsdp_cfg.sharding_strategy == "no_shard":
        return init_device_mesh(device.type, (world_size, 1), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device.type, (world_size,), mesh_dim_names=("shard",))


def sharding_units(policy: nn.Module) -> list[nn.Module]:
    """Sub-modules that become their own FSDP unit (all-gathered one at a time)."""
    units = getattr(policy, "fsdp_units", None)
    if not callable(units):
        raise TypeError(f"{type(policy).__name__} has no fsdp_units(); every BasePolicy names its FSDP units")
    return list(units())


def apply_fsdp2(policy: nn.Module, fsdp_cfg, world_size: int, device: torch.device) -> nn.Module:
    """Shard `policy` in place with FSDP2 and return it. Parameters become DTensors."""
    param_dtype, reduce_dtype = check_precision(fsdp_cfg, device)
    mesh = device_mesh(fsdp_cfg, world_size, device)
    kwargs = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        "reshard_after_forward": fsdp_cfg.sharding_strategy == "full_shard",
    }
    if fsdp_cfg.cpu_offload:
        # Pinned host memory speeds host-device copies; there are none (and no pinning) without a GPU.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    for unit in sharding_units(policy):
        if any(True for _ in unit.parameters()):
            fully_shard(unit, **kwargs)
    # The root's parameters are needed again right at the start of backward: keep them gathered.
    fully_shard(policy, **{**kwargs, "reshard_after_forward": False})
    return policy


def store_frozen_in(policy: nn.Module, dtype: torch.dtype) -> None:
    """Frozen parameters (the base under LoRA) in the compute dtype: they never update, so they need
    no fp32 master copy, and FSDP gathers them in that dtype anyway. Halves a bf16 LoRA actor's
    weights; trainable parameters keep fp32 masters. Ties between modules are kept."""
    if dtype == torch.float32:
        return
    cast: dict[int, nn.Parameter] = {}
    for module in policy.modules():
        for name, p in list(module._parameters.items()):
            if p is None or p.requires_grad or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in cast:
                cast[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=False)
            module._parameters[name] = cast[id(p)]


def build_sharded_policy(model_cfg, fsdp_cfg, *, rank: int, world_size: int, device: torch.device, init_seed: int,
                         warn_untrained_value_head: bool) -> nn.Module:
    """The policy of `model_cfg` with fp32 trainable weights (frozen ones in the compute dtype:
    store_frozen_in), sharded with apply_fsdp2, without a full copy on any
    accelerator and with one full copy in host memory on rank 0 only. Collective.

    Rank 0 first reads the checkpoint into a CPU policy built as from_checkpoint builds it (random
    parts seeded by `init_seed`, all in fp32) and casts its frozen weights to the compute dtype,
    keeping only the state dict: its host peak is the fp32 build, not the build beside its shards.
    Then every rank builds the module tree on the meta device (policy `skeleton`), shards it and
    allocates only its shards (`to_empty`: on the CPU under cpu_offload, else on `device`), and
    torch's `set_model_state_dict(full_state_dict, broadcast_from_rank0)` sends rank 0's tensors
    one by one, every rank keeping its shard: weights identical to building the whole policy on
    each rank and sharding it. Non-persistent buffers (RoPE frequencies) come from the skeleton,
    computed as from_checkpoint computes them."""
    param_dtype = check_precision(fsdp_cfg, device)[0]
    full: dict[str, torch.Tensor] = {}
    if rank == 0:
        torch.manual_seed(init_seed)  # as the eager build: the random parts (value head, LoRA) match it
        # Built on the CPU: flash-attn cannot run there, and the kernel plays no part in the weights.
        cpu = torch.device("cpu")
        whole = build_policy(model_cfg.runnable_on(cpu), device=cpu, dtype=torch.float32, init_seed=init_seed,
                             warn_untrained_value_head=warn_untrained_value_head)
        store_frozen_in(whole, param_dtype)  # the fp32 copies go now, before the shards are allocated
        full = whole.state_dict()
        del whole
    policy = policy_class(model_cfg.model_type).skeleton(model_cfg.model_path, model_cfg, device=device, dtype=torch.float32)
    store_frozen_in(policy, param_dtype)
    computed = {name: buf.detach().clone() for name, buf in policy.named_buffers() if not buf.is_meta}
    apply_fsdp2(policy, fsdp_cfg, world_size, device)
    policy.to_empty(device=torch.device("cpu") if fsdp_cfg.cpu_offload else device)
    for name, buf in computed.items():  # to_empty left them uninitialised
        owner, _, attr = name.rpartition(".")
        setattr(policy.get_submodule(owner), attr, buf.to(getattr(policy.get_submodule(owner), attr).device))
    set_model_state_dict(policy, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del full
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the broadcast's full-size staging tensors
    return policy


def defers_gradient_sync(policy: nn.Module, fsdp_cfg, world_size: int) -> bool:
    """Whether the micro-batches before an optimizer step skip the gradient reduce-scatter, each
    rank accumulating full-size gradients of the trainable weights until the last one: without
    sharding (gradients are full-size anyway), or when those gradients take no more memory than
    this rank's shard of all weights (LoRA, a head). A sharded full fine-tune keeps reducing
    every micro-batch, so its gradient memory stays sharded. Never under mixed precision: FSDP2
    frees the compute-dtype copy of the weights after each backward, and the next micro-batch's
    accumulation into it fails (torch 2.13: FSDPParam has no `_unsharded_param`); keeping the
    copies instead would hold the whole model in the compute dtype between micro-batches."""
    if fsdp_cfg.mixed_precision.param_dtype != "fp32":
        return False
    if fsdp_cfg.sharding_strategy == "no_shard":
        return True
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    return trainable * world_size <= sum(p.numel() for p in policy.parameters())


def is_sharded(model: nn.Module) -> bool:
    return all(isinstance(p, DTensor) for p in model.parameters())


_FULL_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def full_model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full, unsharded CPU tensors on rank 0 ({} elsewhere). Collective: call on every rank."""
    return get_model_state_dict(model, options=_FULL_CPU)


def gather_full(sd: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor] | None:
    """Full CPU copies of a (possibly sharded) state dict on rank 0, None elsewhere. Collective:
    every rank must pass the same keys in the same order (a policy's state dict is ordered)."""
    out = {name: full.detach().to("cpu", copy=True) for name, full in iter_full(sd, rank)}
    return out if rank == 0 else None


def iter_full(sd: dict[str, torch.Tensor], rank: int) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor on the shards' device) one at a time on rank 0; nothing elsewhere, but
    every rank must exhaust it (each tensor is all-gathered in turn: a collective, same keys in
    the same order everywhere). Only one gathered tensor is alive at a time on any rank."""
    for name, value in sd.items():
        full = value.full_tensor() if isinstance(value, DTensor) else value
        if rank == 0:
            yield name, full
        del full


def move_training_state(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move sharded parameters, gradients and optimizer state to `device` (offload / reload)."""
    model.to(device)  # FSDPModule._apply moves the sharded DTensors
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device, non_blocking=True)
    if device.type == "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
