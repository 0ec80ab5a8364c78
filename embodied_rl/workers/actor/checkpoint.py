"""The actor's part of a training checkpoint, sharded with `torch.distributed.checkpoint` (DCP).

Layout of `actor/` (inside checkpoints/global_step_N/, runtime/checkpoint.py):

    dcp/              DCP directory: {"model": trainable weights (policy.trainable_state_dict),
                      "optim": AdamW state keyed by parameter name}. Every rank writes its own
                      shards (`__<rank>_0.distcp`); rank 0 also writes `.metadata`.
    actor_state.pt    rank 0: weight version, world size, LR scheduler, minibatch shuffle,
                      per-rank RNG states, and the update's own state (its demo sampler,
                      critic replay; all small)

No rank gathers the model or the optimizer: each writes its slices at once, so a save takes
about what the slowest rank's share takes. DCP's own collectives (plans, write results) and
the closing barrier run on a gloo group with `IO_TIMEOUT_S`, not the training group's
timeout, so slow storage delays a save instead of failing it.

Loading reshards: each rank reads the slices of its shards whatever world size wrote them,
so a run resumes on a different number of actor ranks (the per-rank RNG streams are then
reassigned, with a warning). Readers without a process group (`embodied-rl export`, eval's
`runner.ckpt_path`, replay, `--compare`) call `read_trainable_weights`, which reads the
"model" entries into full CPU tensors with DCP's no-process-group load; it also reads the
`trainable.safetensors` of checkpoints written before DCP. Those older checkpoints cannot be
resumed (their optimizer file is a rank-0 full state dict): evaluate or export them instead.
"""
from __future__ import annotations

import logging
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from embodied_rl.distributed.rng import capture_rng_state, restore_rng_state
from embodied_rl.errors import CheckpointError
from embodied_rl.workers.actor import STATE_FILE, WEIGHTS_FILE

if TYPE_CHECKING:
    from embodied_rl.workers.actor.engine import TrainEngine

log = logging.getLogger(__name__)

DCP_DIR = "dcp"
#: Timeout of the checkpoint's collectives: writing a large model's shards to slow storage.
IO_TIMEOUT_S = 4 * 3600.0


def io_group() -> dist.ProcessGroup:
    """A gloo group over the actor's ranks for checkpoint collectives (every rank must call it,
    in the same order as the other groups it makes)."""
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=IO_TIMEOUT_S))


def save(w: TrainEngine, actor_dir: str | Path, group: dist.ProcessGroup, extra: dict[str, Any]) -> None:
    """Every rank writes its shards of the trainable weights and the optimizer state; rank 0
    writes the small state file, with the update's own state `extra` (picklable with
    weights_only: tensors, numbers, lists, dicts). Collective."""
    out = Path(actor_dir)
    (out / DCP_DIR).mkdir(parents=True, exist_ok=True)  # one shared directory (checked at start on clusters)
    state = {"model": w.policy.trainable_state_dict(), "optim": get_optimizer_state_dict(w.policy, w.optimizer)}
    dcp.save(state, checkpoint_id=out / DCP_DIR, process_group=group)
    rngs = [None] * w.world_size if w.rank == 0 else None
    dist.gather_object(capture_rng_state(), rngs, dst=0, group=group)
    if w.rank == 0:
        sched = w.scheduler.state_dict()
        # The schedule's shape comes from the config on resume (e.g. a longer max_steps), not the file.
        sched["lr_lambdas"] = [None] * len(sched["lr_lambdas"])
        torch.save({"version": w.version, "world_size": w.world_size, "scheduler": sched,
                    "shuffle": w.shuffle.get_state(), "rng": rngs, **extra}, out / STATE_FILE)
    dist.barrier(group=group)


def load(w: TrainEngine, actor_dir: str | Path, group: dist.ProcessGroup) -> dict[str, Any]:
    """Restore what `save` wrote (resharded to this world size); returns the state file's
    contents (the update's state among them). Collective."""
    path = Path(actor_dir)
    if not (path / STATE_FILE).is_file():
        raise CheckpointError(f"{path}: not an actor checkpoint (no {STATE_FILE}); pass a checkpoint directory written by embodied-rl train")
    if not (path / DCP_DIR).is_dir():
        raise CheckpointError(f"{path}: written before sharded checkpoints (no {DCP_DIR}/), so it cannot be resumed; "
                              "evaluate or export it, or start a new run from its exported policy")
    reader = dcp.FileSystemReader(path / DCP_DIR)
    saved = reader.read_metadata().state_dict_metadata
    # Made from the live optimizer, which gets zero state for every trainable parameter here;
    # a parameter the saved run never gave a gradient has no state there and keeps none.
    optim = get_optimizer_state_dict(w.policy, w.optimizer)
    optim["state"] = {name: s for name, s in optim["state"].items() if f"optim.state.{name}.step" in saved}
    state = {"model": w.policy.trainable_state_dict(), "optim": optim}  # the weights load in place
    dcp.load(state, storage_reader=reader, process_group=group)
    set_optimizer_state_dict(w.policy, w.optimizer, state["optim"], options=StateDictOptions(strict=False))
    meta = torch.load(path / STATE_FILE, weights_only=True)
    w.scheduler.load_state_dict(meta["scheduler"])
    w.shuffle.set_state(meta["shuffle"])
    w.version = int(meta["version"])
    if meta["world_size"] != w.world_size:
        log.warning("actor checkpoint was written by %d ranks, resuming on %d: per-rank RNG streams are reassigned",
                    meta["world_size"], w.world_size)
    restore_rng_state(meta["rng"][w.rank % meta["world_size"]])
    return meta


def has_trainable_weights(actor_dir: str | Path) -> bool:
    path = Path(actor_dir)
    return (path / DCP_DIR / ".metadata").is_file() or (path / WEIGHTS_FILE).is_file()


def read_trainable_weights(actor_dir: str | Path) -> dict[str, torch.Tensor]:
    """Full CPU tensors of a checkpoint's trainable weights, read without a process group."""
    path = Path(actor_dir)
    if (path / WEIGHTS_FILE).is_file():
        return load_file(str(path / WEIGHTS_FILE))
    reader = dcp.FileSystemReader(path / DCP_DIR)
    entries = reader.read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(md.size, dtype=md.properties.dtype)
             for key, md in entries.items() if key.startswith("model.")}
    with warnings.catch_warnings():  # DCP warns on every load without a process group, even when asked for one
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load({"model": model}, storage_reader=reader, no_dist=True)
    return model
