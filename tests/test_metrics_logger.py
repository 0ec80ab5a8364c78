"""MetricsLogger: metrics.jsonl, console, TensorBoard, wandb offline without prompting, resume."""
from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from embodied_rl.runtime.metrics_logger import METRICS_FILE, MetricsLogger
from embodied_rl.sinks.wandb import wandb_mode
from tests.wandb_support import wandb_records


def _cfg(*backends: str) -> SimpleNamespace:
    return SimpleNamespace(logger_backends=list(backends), project_name="embodied_rl_test", experiment_name="unit")


def _lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]


def _tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard itself reads the event files (purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _wandb_history(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {metric: value} of the offline wandb run's logged history rows."""
    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    rows = {}
    for record in wandb_records(log):
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        rows[record.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
    return rows


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
    # Non-finite values are left out of TensorBoard and wandb (no NaN points on the charts).
    assert _tensorboard_scalars(tmp_path) == {
        "train/actor/policy_loss": [(1, 0.5)], "env/success_once": [(1, 0.25), (2, 0.5)], "time/step": [(1, 1.0)]}
    assert _wandb_history(tmp_path) == {
        1: {"train/actor/policy_loss": 0.5, "env/success_once": 0.25, "time/step": 1.0}, 2: {"env/success_once": 0.5}}
    text = out.getvalue()
    assert "| train/actor/policy_loss" in text  # console table
    assert "[step 1/2]" in text and "ETA" in text.split("[step 1/2]")[1].splitlines()[0]


def _progress_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("[step", "[done"))]


def test_progress_line_of_a_finished_run_says_done_without_eta(tmp_path):
    out = io.StringIO()
    with MetricsLogger(_cfg(), tmp_path / "train", total_steps=2, stream=out) as logger:
        logger.log(1, {"env/success_once": 0.25})
        logger.log(2, {"env/success_once": 0.5})
    first, last = _progress_lines(out.getvalue())
    assert first.startswith("[step 1/2]") and "ETA" in first
    assert last.startswith("[done 2/2] in ") and "ETA" not in last and last.endswith("success 0.500")
    # Eval-only: one log at the checkpoint's step (0 without one) with total_steps=1.
    out = io.StringIO()
    with MetricsLogger(_cfg(), tmp_path / "eval", total_steps=1, stream=out) as logger:
        logger.log(0, {"eval/success_once": 0.75})
    (line,) = _progress_lines(out.getvalue())
    assert line.startswith("[done 1/1] in ") and "ETA" not in line and line.endswith("success 0.750")
    # A resumed run is done at total_steps too, not after total_steps more logs.
    out = io.StringIO()
    with MetricsLogger(_cfg(), tmp_path / "train", total_steps=3, start_step=2, stream=out) as logger:
        logger.log(3, {"env/success_once": 1.0})
    assert _progress_lines(out.getvalue())[0].startswith("[done 3/3]")


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
    with MetricsLogger(_cfg("tensorboard"), tmp_path, total_steps=5, stream=io.StringIO()) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"train/actor/policy_loss": float(step)})
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"step": 4, "train/act')  # torn line of a crash mid-write
    with MetricsLogger(_cfg("tensorboard"), tmp_path, total_steps=5, start_step=2, stream=io.StringIO()) as logger:
        logger.log(3, {"train/actor/policy_loss": 30.0})
    rows = _lines(tmp_path)
    assert [(r["step"], r["train/actor/policy_loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    # TensorBoard reads both event files and drops the first run's step 3 (purge_step).
    assert _tensorboard_scalars(tmp_path) == {"train/actor/policy_loss": [(1, 1.0), (2, 2.0), (3, 30.0)]}


def test_rejects_unknown_metric_prefix_and_backend(tmp_path):
    with MetricsLogger(_cfg(), tmp_path, total_steps=1, stream=io.StringIO()) as logger, pytest.raises(ValueError, match="prefix"):
        logger.log(1, {"loss": 1.0})
    with pytest.raises(Exception, match="logger_backends"):
        MetricsLogger(_cfg("swanlab"), tmp_path, total_steps=1)
