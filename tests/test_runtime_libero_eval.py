"""Eval-only on two libero_spatial tasks with the tiny preset: real LIBERO, real tiny
OpenVLA-OFT with two cameras and proprio, through the CLI and the Ray workers."""
from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import pytest

from tests.cli_runs import read_metrics, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.libero]


def test_eval_two_libero_spatial_tasks_writes_per_task_success_and_videos(tmp_path: Path):
    run_cli("eval", "libero_grpo_tiny", f"runner.output_dir={tmp_path / 'runs'}",
            f"actor.model.model_path={tmp_path / 'tiny-libero'}", "env.eval.max_episode_steps=16", cwd=tmp_path)
    run = tmp_path / "runs" / "libero_grpo_tiny"
    row = read_metrics(run)[0]
    assert row["eval/num_trajectories"] == 2
    for task in ("libero_spatial_task0", "libero_spatial_task1"):  # one env per task (spread reset ids)
        assert row[f"eval/num_trajectories/{task}"] == 1
        assert 0.0 <= row[f"eval/success_once/{task}"] <= 1.0
    videos = sorted((run / "video" / "eval").rglob("*.mp4"))
    assert len(videos) == 2  # 2 env workers x 1 stage
    for video in videos:
        side = json.loads(video.with_suffix(".json").read_text())
        grid = side["grid"]
        assert grid["tile_width"] == 2 * grid["tile_height"]  # wrist view beside the main view
        assert {e["task_id"] for e in side["episodes"]} <= {"libero_spatial_task0", "libero_spatial_task1"}
        frames = iio.imread(video)
        assert frames.shape[0] == side["num_frames"] and frames.shape[2] == grid["cols"] * grid["tile_width"]
    assert json.loads(videos[0].with_suffix(".json").read_text())["mode"] == "eval"
