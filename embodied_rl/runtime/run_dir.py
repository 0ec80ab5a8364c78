"""One run per run directory: a new run never writes into a directory that holds an earlier one.

A run's metrics.jsonl keeps only the lines up to the step it starts from (what a resume needs),
so a fresh run or an evaluation started in an earlier run's directory would drop that run's
metrics and write over its config and step-0 videos. `embodied-rl train/sft/eval` refuse that
before anything starts; continuing the same run (`runner.resume_dir`) is what the directory is for.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig


class RunDirInUseError(ConfigError):
    """runner.logger.log_path holds an earlier run's results (`print-config` notes it, runs refuse)."""


def earlier_run(run_dir: str | Path) -> str | None:
    """What of an earlier run `run_dir` holds ('metrics.jsonl with 3 logged step(s), checkpoint
    global_step_00000002'), or None when nothing a run produced is there (a missing directory, or
    a run that failed while starting and logged nothing)."""
    from embodied_rl.runtime.metrics_logger import METRICS_FILE, logged_steps

    run_dir = Path(run_dir)
    held = []
    steps = logged_steps(run_dir / METRICS_FILE)
    if steps:
        held.append(f"{METRICS_FILE} with {len(steps)} logged step(s)")
    if (run_dir / "checkpoints").is_dir():
        from embodied_rl.runtime.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(run_dir)
        if ckpt is not None:
            held.append(f"checkpoint {ckpt.name}")
    return ", ".join(held) or None


def check_run_dir_free(cfg: RootConfig) -> None:
    """Refuse a run whose directory holds another run's results, unless it continues that run."""
    r = cfg.runner
    if r.resume_dir:
        return
    held = earlier_run(r.logger.log_path)
    if held is None:
        return
    path = r.logger.log_path
    # A config saved by a run holds its log_path resolved: experiment_name no longer moves it.
    name = f"{Path(path).name}_eval" if r.only_eval else "NEW_NAME"
    new = (f"runner.experiment_name={name}" if Path(path).name == r.experiment_name
           else f"runner.logger.log_path={Path(path).parent / name}")
    resume = "" if r.only_eval else "continue that run with runner.resume_dir=latest, "
    raise RunDirInUseError(f"runner.logger.log_path={path} holds an earlier run ({held}); {resume}"
                           f"give this {'evaluation' if r.only_eval else 'run'} its own directory with {new}, or delete {path}")
