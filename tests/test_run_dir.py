"""One run per run directory: train, sft and eval refuse a directory that holds an earlier run
(its metrics and config are left byte for byte), resume continues it, print-config notes it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rl.configure import load_config
from embodied_rl.runtime.run_dir import (
    RunDirInUseError,
    check_run_dir_free,
    earlier_run,
)

CONFIG = "maniskill_ppo_tiny"


def _earlier_run(run: Path, steps: int = 2, checkpoint: bool = False) -> None:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("# the earlier run's config\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "eval/success_once": 0.5}) + "\n" for s in range(steps)))
    if checkpoint:
        ckpt = run / "checkpoints" / "global_step_00000002"
        ckpt.mkdir(parents=True)
        (ckpt / "meta.json").write_text("{}")


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(CONFIG, [f"runner.output_dir={tmp_path / 'runs'}", *overrides], plan=False)


def test_what_counts_as_an_earlier_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert earlier_run(run) is None  # no directory
    run.mkdir()
    (run / "config.yaml").write_text("x: 1\n")
    (run / "metrics.jsonl").write_text("{\"step\": 0, \"eval/suc")  # a run that died mid-line, logging nothing whole
    assert earlier_run(run) is None
    (run / "metrics.jsonl").write_text("{\"step\": 0}\n{\"step\": 1}\n")
    assert earlier_run(run) == "metrics.jsonl with 2 logged step(s)"
    ckpt = run / "checkpoints" / "global_step_00000001"
    ckpt.mkdir(parents=True)
    assert "checkpoint" not in earlier_run(run)  # incomplete: no meta.json
    (ckpt / "meta.json").write_text("{}")
    assert earlier_run(run) == "metrics.jsonl with 2 logged step(s), checkpoint global_step_00000001"


def test_fresh_run_refused_resume_allowed(tmp_path: Path) -> None:
    _earlier_run(tmp_path / "runs" / CONFIG, checkpoint=True)
    with pytest.raises(RunDirInUseError, match=r"holds an earlier run .*runner\.resume_dir=latest.*runner\.experiment_name=NEW_NAME"):
        check_run_dir_free(_cfg(tmp_path))
    check_run_dir_free(_cfg(tmp_path, "runner.resume_dir=latest"))
    check_run_dir_free(_cfg(tmp_path, "runner.experiment_name=other"))
    with pytest.raises(RunDirInUseError, match=f"runner.experiment_name={CONFIG}_eval") as err:
        check_run_dir_free(_cfg(tmp_path, "runner.only_eval=true"))
    assert "resume_dir" not in str(err.value)


def test_a_saved_config_names_log_path_as_the_fix(tmp_path: Path) -> None:
    """A run's saved config.yaml holds log_path resolved: renaming the experiment does not move it."""
    _earlier_run(tmp_path / "runs" / CONFIG)
    cfg = _cfg(tmp_path, f"runner.logger.log_path={tmp_path / 'runs' / CONFIG}", "runner.experiment_name=again")
    with pytest.raises(RunDirInUseError, match=f"runner.logger.log_path={tmp_path / 'runs' / 'NEW_NAME'}"):
        check_run_dir_free(cfg)


def test_the_runtime_entry_refuses_too(tmp_path: Path) -> None:
    """A run started from Python, not the CLI, is refused before its model or Ray exist."""
    from embodied_rl.runtime.train import main

    _earlier_run(tmp_path / "runs" / CONFIG)
    cfg = _cfg(tmp_path, f"actor.model.model_path={tmp_path / 'model'}")
    with pytest.raises(RunDirInUseError):
        main(cfg)
    assert not (tmp_path / "model").exists()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_cli_refuses_before_anything_is_written(tmp_path: Path) -> None:
    run = tmp_path / "runs" / CONFIG
    _earlier_run(run, steps=3, checkpoint=True)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for command in ("train", "eval"):
        out = _cli(command, CONFIG, cwd=tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and f"runner.logger.log_path=runs/{CONFIG} holds an earlier run" in lines[0], out.stderr
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [CONFIG]
    printed = _cli("print-config", CONFIG, cwd=tmp_path)
    assert printed.returncode == 0 and "note: runner.logger.log_path" in printed.stderr and "runner:" in printed.stdout
