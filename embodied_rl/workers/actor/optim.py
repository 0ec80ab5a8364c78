"""AdamW with a separate value-head group, and the per-training-step LR schedule.

Keys: `actor.optim.*` (schema/runtime.py::OptimConfig). One scheduler step is taken per
training step (not per optimizer step), so the schedule is measured in the same unit as
`runner.max_steps` and `lr_warmup_steps`, whatever the batch sizes are.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from embodied_rl.errors import ConfigError
from embodied_rl.workers.actor import CRITIC_GROUP

#: Parameters whose dotted name contains this component train with `value_lr`.
VALUE_HEAD_COMPONENT = "value_head"


def is_value_head_param(name: str) -> bool:
    return VALUE_HEAD_COMPONENT in name.split(".")


def build_param_groups(named_params: Iterable[tuple[str, nn.Parameter]], lr: float, value_lr: float) -> list[dict]:
    """Trainable parameters split into the policy group (`lr`) and the value-head group (`value_lr`).

    Frozen parameters (requires_grad False, e.g. the base weights under LoRA) are left out,
    so the optimizer holds state only for what trains. An empty group is dropped.
    """
    policy, value = [], []
    for name, p in named_params:
        if p.requires_grad:
            (value if is_value_head_param(name) else policy).append(p)
    groups = [
        {"params": policy, "lr": lr, "name": "policy"},
        {"params": value, "lr": value_lr, "name": CRITIC_GROUP},
    ]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise ConfigError("actor.model: the policy has no trainable parameters; set actor.model.is_lora or unfreeze weights")
    return groups


def build_optimizer(model: nn.Module, optim_cfg) -> torch.optim.AdamW:
    """AdamW over the trainable parameters of `model` (DTensors under FSDP2 work as-is)."""
    groups = build_param_groups(model.named_parameters(), optim_cfg.lr, optim_cfg.value_lr)
    return torch.optim.AdamW(
        groups,
        lr=optim_cfg.lr,
        betas=(optim_cfg.adam_beta1, optim_cfg.adam_beta2),
        eps=optim_cfg.adam_eps,
        weight_decay=optim_cfg.weight_decay,
    )


def clip_sets(param_groups: list[dict], critic_apart: bool) -> list[list[nn.Parameter]]:
    """Parameter sets whose gradient norm is clipped as one: every trainable weight together, or,
    with critic_apart (an asymmetric critic that shares no weight with the policy), the policy's
    and the value head's apart, so the critic's loss scale never shrinks the policy's step."""
    if not critic_apart:
        return [[p for g in param_groups for p in g["params"]]]
    return [[p for g in param_groups if g["name"] != CRITIC_GROUP for p in g["params"]],
            [p for g in param_groups if g["name"] == CRITIC_GROUP for p in g["params"]]]


def clip_gradients(sets: list[list[nn.Parameter]], clip: float) -> list[float]:
    """Clip each set's gradient norm to `clip` (<= 0: measure only); parameters without a
    gradient are left out, a set without any is skipped. Returns the norms before clipping."""
    norms = []
    for params in sets:
        params = [p for p in params if p.grad is not None]
        if params:
            norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
            norms.append(float(norm.full_tensor() if isinstance(norm, DTensor) else norm))
    return norms


# Decay shape after warm-up by schedule name: progress 0 -> 1 maps to 1 -> 0.
DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "constant": lambda progress: 1.0,
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
    "linear": lambda progress: 1.0 - progress,
}


def lr_multiplier(step: int, *, kind: str, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Multiplier of the base LR in training step `step` (0-based).

    Warm-up is linear and reaches 1 at step warmup_steps - 1 (the first step trains with
    lr / warmup_steps, never with 0). Then `constant` stays at 1 while `cosine` and
    `linear` decay to `min_ratio` at step total_steps - 1.
    """
    if kind not in DECAY_SHAPES:
        raise ConfigError(f"actor.optim.lr_scheduler={kind!r} is not valid; choose one of: {', '.join(DECAY_SHAPES)}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps - 1)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_ratio + (1.0 - min_ratio) * DECAY_SHAPES[kind](progress)


def build_scheduler(optimizer: torch.optim.Optimizer, optim_cfg, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR applying `lr_multiplier` to every group; `min_lr` is relative to `lr`, so the
    value-head group decays to value_lr * min_lr / lr."""
    min_ratio = optim_cfg.min_lr / optim_cfg.lr if optim_cfg.lr > 0 else 0.0
    fn: Callable[[int], float] = _Multiplier(optim_cfg.lr_scheduler, optim_cfg.lr_warmup_steps, total_steps, min_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


class _Multiplier:
    """Picklable LR lambda (a closure could not travel in a Ray call or a checkpoint)."""

    def __init__(self, kind: str, warmup_steps: int, total_steps: int, min_ratio: float) -> None:
        self.kind, self.warmup_steps, self.total_steps, self.min_ratio = kind, warmup_steps, total_steps, min_ratio

    def __call__(self, step: int) -> float:
        return lr_multiplier(step, kind=self.kind, warmup_steps=self.warmup_steps, total_steps=self.total_steps, min_ratio=self.min_ratio)


def set_lr_scale(scheduler: torch.optim.lr_scheduler.LambdaLR, optim_cfg, scale: float) -> None:
    """Base learning rates = the config's (lr for the policy group, value_lr for the value head)
    x `scale`, at the scheduler's current step. A checkpoint's scheduler state carries the base
    rates of the run that wrote it; this puts the resuming config's back (a resume with a lower
    actor.optim.lr trains with it), and a health rollback lowers them by its factor."""
    opt = scheduler.optimizer
    base = [(optim_cfg.value_lr if g["name"] == CRITIC_GROUP else optim_cfg.lr) * scale for g in opt.param_groups]
    scheduler.base_lrs = base
    step = scheduler.last_epoch
    for group, base_lr, fn in zip(opt.param_groups, base, scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = base_lr
        group["lr"] = base_lr * fn(step)
    scheduler._last_lr = [g["lr"] for g in opt.param_groups]
