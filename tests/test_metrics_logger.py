"""MetricsLogger: metrics.jsonl, console, TensorBoard, wandb offline without prompting, resume."""
from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from embodied_rl.runtime.metrics_logger import METRICS_FILE, MetricsLogger, wandb_mode


def _cfg(*backends: str) -> SimpleNamespace:
    return SimpleNamespace(logger_backends=list(backends), project_name="embodied_rl_test", experiment_name="unit")


def _lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]


def test_all_backends_write_files_and_wandb_stays_offline(tmp_path, monkeypatch):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no stored login either
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    assert wandb_mode() == "offline"
    out = io.StringIO()  # not a TTY: compact progress lines instead of a bar
    with MetricsLogger(_cfg("console", "tensorboard", "wandb"), tmp_path, total_steps=2, config={"a": 1}, stream=out) as logger:
        logger.log(1, {"train/actor/policy_loss": 0.5, "env/success_once": 0.25, "time/step": 1.0})
        logger.log(2, {"train/actor/policy_loss": float("nan"), "env/success_once": 0.5})
    rows = _lines(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["train/actor/policy_loss"] == 0.5 and rows[1]["train/actor/policy_loss"] is None  # strict JSON
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    offline_runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert offline_runs, sorted(p.name for p in (tmp_path / "wandb").iterdir())
    text = out.getvalue()
    assert "| train/actor/policy_loss" in text  # console table
    assert "[step 2/2]" in text and "success 0.500" in text and "ETA" in text


def test_wandb_mode_rules(tmp_path):
    assert wandb_mode({"NETRC": str(tmp_path / "none")}) == "offline"
    assert wandb_mode({"WANDB_API_KEY": "x" * 40}) == "online"
    assert wandb_mode({"WANDB_API_KEY": "x" * 40, "WANDB_MODE": "disabled"}) == "disabled"
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    rc.chmod(0o600)
    assert wandb_mode({"NETRC": str(rc)}) == "online"
    assert wandb_mode({"NETRC": str(rc), "WANDB_BASE_URL": "https://wandb.example.org"}) == "offline"


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    with MetricsLogger(_cfg(), tmp_path, total_steps=5, stream=io.StringIO()) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"train/actor/policy_loss": float(step)})
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"step": 4, "train/act')  # torn line of a crash mid-write
    with MetricsLogger(_cfg(), tmp_path, total_steps=5, start_step=2, stream=io.StringIO()) as logger:
        logger.log(3, {"train/actor/policy_loss": 30.0})
    rows = _lines(tmp_path)
    assert [(r["step"], r["train/actor/policy_loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_rejects_unknown_metric_prefix_and_backend(tmp_path):
    with MetricsLogger(_cfg(), tmp_path, total_steps=1, stream=io.StringIO()) as logger, pytest.raises(ValueError, match="prefix"):
        logger.log(1, {"loss": 1.0})
    with pytest.raises(Exception, match="logger_backends"):
        MetricsLogger(_cfg("swanlab"), tmp_path, total_steps=1)
