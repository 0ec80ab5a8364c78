"""Atomic training checkpoints with a `latest` pointer, and resume-path resolution.

Layout under the run directory (`runner.logger.log_path`):

    checkpoints/
      global_step_00000003/
        meta.json          format, global step, weight version, wall time (written last)
        config.yaml        the resolved config of the run
        runner_state.pt    global step, driver RNG state, `extra` runner state (env reset-id
                           streams, running reward statistics, ...) handed in by the runner
        actor/             ActorWorker.save_checkpoint (workers/actor/checkpoint.py): trainable
                           weights and optimizer state sharded with torch.distributed.checkpoint,
                           LR scheduler, shuffle and per-rank RNG state
      latest               text file naming the newest complete checkpoint directory

Atomicity: everything is written into `checkpoints/.tmp-global_step_N-<pid>/` and moved into
place with one `rename` after `meta.json` is written; `latest` is replaced with
`os.replace`. A crash mid-save leaves a hidden temp directory (removed by the next save)
and the previous checkpoint and pointer untouched; a directory without `meta.json` is
never resumed from.

Weights and optimizer state are written by every actor rank, its own shards, and resharded on
load, so a run can resume on a different number of actor ranks; the trainable weights are
the policy's own `trainable_state_dict` (LoRA + value head, or all weights), frozen base
weights come back from `actor.model.model_path`. Export, eval and replay read the trainable
weights as full tensors without a process group (`read_trainable_weights`).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied_rl.distributed.rng import capture_rng_state, restore_rng_state
from embodied_rl.errors import CheckpointError
from embodied_rl.workers.actor import WEIGHTS_FILE as ACTOR_WEIGHTS
from embodied_rl.workers.actor.checkpoint import (
    has_trainable_weights,
    read_trainable_weights,
)

FORMAT = 1
CKPT_DIR, LATEST, META, CONFIG, RUNNER_STATE, ACTOR_DIR = "checkpoints", "latest", "meta.json", "config.yaml", "runner_state.pt", "actor"
#: The policy's normalisation statistics when the run replaced the model's (SFT), official format.
STATISTICS = "dataset_statistics.json"


def step_dir_name(global_step: int) -> str:
    return f"global_step_{global_step:08d}"


@dataclass
class RunnerState:
    global_step: int
    weight_version: int
    extra: dict[str, Any]
    path: Path


@contextmanager
def checkpoint_writer(run_dir: str | Path, global_step: int) -> Iterator[Path]:
    """Yield a fresh temp directory to fill; on normal exit it becomes
    `checkpoints/global_step_N` and `latest` points at it. On an exception nothing changes."""
    root = Path(run_dir) / CKPT_DIR
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(root)
    name = step_dir_name(global_step)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not (tmp / META).is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError("checkpoint_writer: write_runner_state() was not called, so the checkpoint has no meta.json")
    final = root / name
    if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
        trash = root / f".tmp-old-{name}-{os.getpid()}"
        final.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
    tmp.rename(final)
    _fsync_dir(root)
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(name + "\n")
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)


def write_runner_state(ckpt_dir: str | Path, *, global_step: int, weight_version: int, config_yaml: str, extra: dict[str, Any] | None = None) -> None:
    """Write the driver's part; call it last inside `checkpoint_writer` (meta.json marks completion)."""
    d = Path(ckpt_dir)
    (d / CONFIG).write_text(config_yaml)
    torch.save({"global_step": global_step, "weight_version": weight_version, "rng": capture_rng_state(), "extra": extra or {}}, d / RUNNER_STATE)
    meta = {"format": FORMAT, "global_step": global_step, "weight_version": weight_version, "time": time.time()}
    with open(d / META, "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())


def write_dataset_statistics(ckpt_dir: str | Path, stats: dict[str, Any]) -> None:
    (Path(ckpt_dir) / STATISTICS).write_text(json.dumps(stats, indent=2))


def read_dataset_statistics(ckpt_dir: str | Path) -> dict[str, Any] | None:
    """The statistics a checkpoint's policy acts with, when they are not its base model's (SFT)."""
    path = Path(ckpt_dir) / STATISTICS
    return json.loads(path.read_text()) if path.is_file() else None


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (via `latest`, else by step number), or None."""
    root = Path(run_dir) / CKPT_DIR
    pointer = root / LATEST
    if pointer.is_file():
        candidate = root / pointer.read_text().strip()
        if (candidate / META).is_file():
            return candidate
    complete = sorted(p for p in root.glob("global_step_*") if (p / META).is_file()) if root.is_dir() else []
    return complete[-1] if complete else None


def resolve_resume_dir(resume_dir: str, run_dir: str | Path, *, key: str = "runner.resume_dir") -> Path:
    """`runner.resume_dir` -> a complete checkpoint directory; 'latest' = newest in run_dir, as
    is a run's checkpoints/latest pointer file.

    key: how errors name the value (the config key or CLI argument it came from)."""
    if resume_dir == "latest":
        found = latest_checkpoint(run_dir)
        if found is None:
            raise CheckpointError(f"{key}=latest: no complete checkpoint under {Path(run_dir) / CKPT_DIR}; train first or pass a checkpoint directory")
        return found
    path = Path(resume_dir)
    if path.name == LATEST and path.is_file() and path.parent.name == CKPT_DIR:  # the run's pointer file
        path = latest_checkpoint(path.parent.parent) or path
    if (path / CKPT_DIR).is_dir() and not (path / META).is_file():  # a run directory was given
        found = latest_checkpoint(path)
        if found is not None:
            return found
    if not path.is_dir():
        raise CheckpointError(f"{key}={resume_dir}: no such directory; pass checkpoints/global_step_N of a run, a run directory or 'latest'")
    if not (path / META).is_file():
        raise CheckpointError(f"{key}={resume_dir}: incomplete or not a checkpoint (no {META}); pass a complete checkpoints/global_step_N directory")
    meta = json.loads((path / META).read_text())
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{key}={resume_dir}: checkpoint format {meta.get('format')} is not supported (expected {FORMAT})")
    return path


def load_runner_state(ckpt_dir: str | Path, *, restore_rng: bool = True) -> RunnerState:
    """Read the driver's part and (by default) put the driver's RNGs back where they were."""
    d = Path(ckpt_dir)
    state = torch.load(d / RUNNER_STATE, weights_only=True)
    if restore_rng:
        restore_rng_state(state["rng"])
    return RunnerState(int(state["global_step"]), int(state["weight_version"]), state["extra"], d)


def actor_dir(ckpt_dir: str | Path) -> Path:
    return Path(ckpt_dir) / ACTOR_DIR


def _remove_stale_temps(root: Path) -> None:
    """Temp directories of crashed saves (their pid is gone or is ours from an earlier attempt)."""
    for p in root.glob(".tmp-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue  # another live process is writing it
        shutil.rmtree(p, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export_policy(ckpt_dir: str | Path, model_cfg, out_dir: str | Path, *, merged: bool = True) -> Path:
    """Write a checkpoint's policy in the official on-disk layout (built on CPU, unsharded).

    model_cfg: the run's `actor.model` (base weights come from its model_path). merged=True
    folds LoRA into the weights (loads with is_lora=false, no peft); False writes base
    weights + `lora_adapter/` via the policy's save_checkpoint.
    The attention kernel is not part of the export: a run trained with flash_attention_2 is
    built with sdpa here (the same weights and attention, up to rounding), and whoever loads
    the export picks the kernel with its own actor.model.attn_implementation; the checkpoint's
    config keeps the kernel the run trained with.
    """
    from embodied_rl.models import build_policy

    if not has_trainable_weights(actor_dir(ckpt_dir)):
        raise CheckpointError(f"{ckpt_dir}: no trainable weights under {ACTOR_DIR}/ (dcp/ or {ACTOR_WEIGHTS}); "
                              "pass a checkpoints/global_step_N directory of a training run")
    # The checkpoint's trainable weights (its value head among them) replace the init at once.
    model_cfg = model_cfg.runnable_on(torch.device("cpu"))
    policy = build_policy(model_cfg, device="cpu", dtype=torch.float32, warn_untrained_value_head=False)
    policy.load_trainable_state_dict(read_trainable_weights(actor_dir(ckpt_dir)))
    stats = read_dataset_statistics(ckpt_dir)
    if stats is not None:
        policy.set_dataset_statistics(stats)
    out = Path(out_dir)
    (policy.export_merged if merged else policy.save_checkpoint)(out)
    return out


def load_trainable_weights(path: str, run_dir: str | Path) -> tuple[dict[str, torch.Tensor], int, dict[str, Any] | None]:
    """`runner.ckpt_path` -> (trainable tensors, weight version, dataset statistics or None) of a
    training checkpoint.

    Accepts what resume_dir accepts: a checkpoints/global_step_N directory, a run directory, 'latest'."""
    d = resolve_resume_dir(path, run_dir, key="runner.ckpt_path")
    if not has_trainable_weights(actor_dir(d)):
        raise CheckpointError(f"runner.ckpt_path={path}: no trainable weights under {actor_dir(d)}; pass a checkpoint written by embodied-rl train")
    meta = json.loads((d / META).read_text())
    return read_trainable_weights(actor_dir(d)), max(1, int(meta["weight_version"])), read_dataset_statistics(d)
