"""`embodied-rl train` / `embodied-rl eval` (and `eval --compare`): the entries the CLI dispatches
to with a validated config."""
from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.schema import RootConfig
from embodied_rl.distributed.worker_group import WorkerError
from embodied_rl.errors import RunError
from embodied_rl.runtime import checkpoint as ckpt

if TYPE_CHECKING:
    from embodied_rl.runtime.runner import EmbodiedRunner


def ensure_model(cfg: RootConfig) -> None:
    """Create the model from `actor.model.create_preset` on first use (the config checks made
    sure a missing checkpoint has a preset)."""
    m = cfg.actor.model
    paths = {m.model_path, cfg.rollout.model.model_path}
    missing = [p for p in paths if not (Path(p) / "config.json").is_file()]
    if not missing:
        return
    preset = m.create_preset
    from embodied_rl.models.create import create_model

    for path in missing:
        print(f"creating the {preset.name} preset at {path} (actor.model.create_preset)", file=sys.stderr)
        create_model(preset.name, path, model_type=m.model_type, image_size=preset.image_size,
                     num_images=m.num_images_in_input, action_dim=m.action_dim, proprio_dim=m.proprio_dim,
                     use_proprio=m.use_proprio, seed=cfg.runner.seed, model_keys=m.preset_keys())


def main(cfg: RootConfig) -> int:
    return _run(cfg, lambda runner: runner.eval_only() if cfg.runner.only_eval else runner.train())


def compare_main(cfg: RootConfig, sources: list) -> int:
    """`embodied-rl eval --compare A B`: `sources` are the PolicySources runtime/checks.py made."""
    return _run(cfg, lambda runner: runner.compare(sources))


def _run(cfg: RootConfig, body) -> int:
    from embodied_rl.runtime.run_dir import check_run_dir_free

    check_run_dir_free(cfg)  # the CLI checked it already; a caller from Python is held to the same rule
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ensure_model(cfg)
    from embodied_rl.runtime.runner import EmbodiedRunner

    runner = EmbodiedRunner(cfg)
    failed = True
    try:
        runner.setup()
        code = body(runner)
        failed = False
        return code
    except WorkerError as err:
        raise run_failure(runner, err) from err
    finally:
        # After a failure a worker may be blocked on a peer that is gone: no graceful close.
        runner.close(graceful=not failed)


def run_failure(runner: EmbodiedRunner, err: WorkerError) -> RunError:
    """The one-line error a run that cannot go on ends with; the whole chained traceback
    (the worker's included) goes to <run dir>/error.log."""
    log_file = runner.run_dir / "error.log"
    log_file.write_text("".join(traceback.format_exception(err)))
    if err.died:
        latest = ckpt.latest_checkpoint(runner.run_dir)
        resume = (f"resume from {latest} with runner.resume_dir=latest" if latest
                  else "no checkpoint was written yet: start the run again")
        return RunError(f"{err} (a worker process died; runner.max_restarts={runner.cfg.runner.max_restarts} "
                        f"restart(s) used: {runner.restarts}); {resume}; traceback in {log_file}")
    return RunError(f"{err}; traceback in {log_file}")
