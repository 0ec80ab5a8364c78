"""Catalog scanning: run discovery, sources, sidecar-vs-folder disagreements, unsafe links, health records."""
from __future__ import annotations

import json
import os
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from embodied_rl.errors import UserError
from embodied_rl.review.catalog import build_catalog, discover_runs
from tests.browser_support import HEALTH_ALARM, make_clean_run, make_health_run

FRAMES = [np.full((32, 64, 3), 20 * i, np.uint8) for i in range(5)]


def _video(path: Path, codec: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimsave(path, FRAMES, fps=5, codec=codec, pixelformat="yuv420p", macro_block_size=1,
                    ffmpeg_log_level="error")


def _sidecar(path: Path, **fields) -> None:
    data = {"schema_version": 2, "run_name": "r", "mode": "train", "global_step": 4, "policy_version": 4,
            "env_worker": 0, "stage": 0, "simulator": "maniskill", "video": "w.mp4", "fps": 5,
            "num_frames": 5, "grid": {"rows": 1, "cols": 1, "tile_height": 32, "tile_width": 64, "num_envs": 1},
            "episodes": []}
    path.write_text(json.dumps(dict(data, **fields)))


def _catalog(*dirs: Path) -> dict:
    return build_catalog(discover_runs([str(d) for d in dirs]), lambda run, rel: f"{run.id}:{rel}")


def test_sources_and_sidecar_authority(tmp_path):
    step = tmp_path / "runs" / "a" / "video" / "train" / "step_000004"
    _video(step / "w.mp4", "libx264")
    _video(step / "w.webm", "libvpx-vp9")
    _sidecar(step / "w.json", mode="eval")
    (step / "empty.mp4").write_bytes(b"")
    (video,) = [v for v in _catalog(tmp_path / "runs" / "a")["videos"] if v["tag"] == "w"]
    assert [s["type"] for s in video["sources"]] == ["video/mp4", "video/webm"]  # sidecar's file first
    assert video["mode"] == "eval" and "listed as eval" in video["warnings"][0]
    empty = next(v for v in _catalog(tmp_path / "runs" / "a")["videos"] if v["tag"] == "empty")
    assert any("empty.mp4 is empty" in w for w in empty["warnings"])


def test_discovery(tmp_path):
    for parent in ("x", "y"):
        (tmp_path / parent / "runs" / "exp").mkdir(parents=True)
        (tmp_path / parent / "runs" / "exp" / "metrics.jsonl").write_text('{"step": 1, "env/return": 1}\n')
    runs = discover_runs([str(tmp_path / "x" / "runs"), str(tmp_path / "y" / "runs" / "exp"),
                          str(tmp_path / "x" / "runs" / "exp")])  # a folder of runs expands; duplicates drop
    assert [r.name for r in runs] == ["x/runs/exp", "y/runs/exp"] and [r.id for r in runs] == ["0", "1"]
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(UserError, match="is not a directory"):
        discover_runs([str(tmp_path / "file.txt")])


def test_video_dir_link_outside_is_not_followed(tmp_path):
    outside = tmp_path / "elsewhere" / "video" / "train" / "step_000001"
    _video(outside / "w.mp4", "libx264")
    run = tmp_path / "runs" / "b"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("a: 1\n")
    os.symlink(tmp_path / "elsewhere" / "video", run / "video")
    catalog = _catalog(run)
    assert catalog["videos"] == [] and "outside the run directory" in catalog["runs"][0]["warnings"][0]
    assert catalog["runs"][0]["config_url"] == "0:config.yaml"


def test_health_of_a_rolled_back_run(tmp_path):
    (run,) = _catalog(make_health_run(tmp_path))["runs"]
    health = run["health"]
    assert health["status"] == "rolled back" and run["warnings"] == []
    assert health["reasons"] == [
        "kl_spike at step 1: train/actor/approx_kl = 8.7 > 1 (action: rollback)",
        "rolled back from step 1 to step 0 (rollback 1); learning rates x0.5 from here",
        "grad_spike at step 3: train/actor/grad_norm = 41.5 > 20 (action: warn)"]
    assert [(a["kind"], a["step"], a["action"]) for a in health["alarms"]] == [("kl_spike", 1, "rollback"),
                                                                             ("grad_spike", 3, "warn")]
    assert [(r["from_step"], r["to_step"], r["lr_scale"]) for r in health["rollbacks"]] == [(1, 0, 0.5)]
    assert health["best"] == {"step": 2, "success": 0.25, "checkpoint": "global_step_2"} and health["stop"] is None


def test_health_without_a_record(tmp_path):
    """No health.jsonl: clean only when the metrics show the monitors ran and never fired."""
    assert _catalog(make_clean_run(tmp_path))["runs"][0]["health"]["status"] == "clean"
    old = tmp_path / "runs" / "old"
    old.mkdir(parents=True)
    (old / "metrics.jsonl").write_text('{"step": 1, "env/return": 1}\n')  # from before the monitors
    assert _catalog(old)["runs"][0]["health"] == {"status": "no health record", "reasons": [], "alarms": [],
                                                  "rollbacks": [], "stop": None, "best": None}
    lost = make_health_run(tmp_path, "lost")
    (lost / "health.jsonl").unlink()
    health = _catalog(lost)["runs"][0]["health"]
    assert health["status"] == "no health record" and health["best"]["step"] == 2
    assert health["reasons"] == ["metrics.jsonl counts alarms (grad_spike) at step 3 but health.jsonl is missing"]


def test_health_bad_lines_are_skipped_with_a_warning(tmp_path):
    run = make_health_run(tmp_path)
    nan_alarm = dict(HEALTH_ALARM, kind="nonfinite", metric="train/actor/loss", step=4, value=float("nan"),
                     threshold=0.0, action="stop", hint="lower the learning rate")
    lines = [json.dumps(HEALTH_ALARM), "{not json", json.dumps({"event": "alarm", "kind": "kl_spike"}),
             json.dumps({"event": "mystery"}), json.dumps(nan_alarm),
             json.dumps({"event": "stop", "step": 4, "reason": "health: nonfinite at step 4: ..."}), '{"event": "rollb']
    (run / "health.jsonl").write_text("\n".join(lines))
    (run / "checkpoints" / "best" / "best.json").write_text("{")
    catalog = _catalog(run)
    (entry,) = catalog["runs"]
    assert entry["warnings"] == [
        "checkpoints/best/best.json: invalid JSON (ignored)",
        "health.jsonl line 2: invalid JSON (skipped)",
        "health.jsonl line 3: alarm without an integer 'step', a 'kind' or an action (warn, rollback, stop) (skipped)",
        "health.jsonl line 4: unknown event 'mystery' (skipped)",
        "health.jsonl line 7: invalid JSON (skipped)"]
    health = entry["health"]
    assert health["status"] == "stopped" and health["best"] is None
    assert health["reasons"][1:] == ["nonfinite at step 4: train/actor/loss = nan > 0 (action: stop)",
                                     "stopped at step 4: nonfinite at step 4: ..."]
    # NaN cannot travel in the server's JSON: the value is null, the line keeps 'nan'.
    assert health["alarms"][1]["value"] is None and health["alarms"][1]["hint"] == "lower the learning rate"
    json.dumps(catalog, allow_nan=False)


def test_health_record_linked_outside_is_not_read(tmp_path):
    run = make_health_run(tmp_path)
    outside = tmp_path / "outside.jsonl"
    (run / "health.jsonl").rename(outside)
    os.symlink(outside, run / "health.jsonl")
    (entry,) = _catalog(run)["runs"]
    assert entry["health"]["status"] == "no health record" and entry["health"]["alarms"] == []
    assert entry["warnings"] == ["health.jsonl not read: not a regular file inside the run directory"]
