"""Rollout videos: a real ManiSkill rollout recorded to mp4 + JSON sidecar, decoded back."""
from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from embodied_rl.config.schema.env import EnvConfig, VideoConfig
from embodied_rl.envs import make_env
from embodied_rl.envs.video import VideoRecorder, grid_shape
from embodied_rl.review.sidecar import load_sidecar
from embodied_rl.types import EnvObservation

SIDECAR_KEYS = {"schema_version", "run_name", "mode", "global_step", "policy_version", "env_worker", "stage",
                "simulator", "video", "fps", "num_frames", "grid", "episodes"}
EPISODE_KEYS = {"env_index", "task_id", "instruction", "reset_id", "return", "success", "success_once",
                "success_at_end", "length", "frame_start", "frame_end", "failed"}


@pytest.mark.maniskill
def test_recorded_rollout_decodes_and_sidecar_matches(tmp_path):
    # StackCube has a wrist (hand) camera: each tile is main | wrist, 64 px upscaled to 128.
    cfg = EnvConfig(
        env_type="maniskill", task_description="stack the red cube on the green cube", max_episode_steps=4,
        auto_reset=True, seed=1, init_params={"id": "StackCube-v1", "camera_heights": 64, "camera_widths": 64},
        video_cfg=VideoConfig(save_video=True, video_base_dir=str(tmp_path / "unused"), fps=10),
    )
    env = make_env(cfg, 2, video_dir=str(tmp_path / "video" / "train"), env_worker=1, stage=0)
    try:
        env.begin_video(global_step=7, policy_version=6, mode="train", run_name="vid-test")
        env.reset()
        ran = []
        for k in range(3):
            ran += env.chunk_step(np.random.default_rng(k).uniform(-1, 1, (2, 3, 7)).astype(np.float32)).episodes
        path = env.end_video()
    finally:
        env.close()
    assert path == str(tmp_path / "video" / "train" / "step_000007" / "worker1_stage0.mp4")
    frames = iio.imread(path)
    # reset frame, 3 + 1 steps (the episode ends at step 4, the rest of that chunk idles), the new
    # episode's first frame at the chunk boundary, 3 steps; 1x2 grid of 128x256 tiles
    assert frames.shape == (9, 128, 512, 3)
    side = json.loads((tmp_path / "video" / "train" / "step_000007" / "worker1_stage0.json").read_text())
    assert SIDECAR_KEYS <= set(side)
    assert side["grid"] == {"rows": 1, "cols": 2, "tile_height": 128, "tile_width": 256, "num_envs": 2}
    assert (side["num_frames"], side["fps"], side["global_step"], side["policy_version"]) == (9, 10, 7, 6)
    assert (side["mode"], side["run_name"], side["simulator"], side["env_worker"]) == ("train", "vid-test", "maniskill", 1)
    finished = [e for e in side["episodes"] if e["finished"]]
    assert all(EPISODE_KEYS <= set(e) for e in side["episodes"])
    # the finished episodes are exactly those the env reported, with their frame ranges
    assert sorted((e.env_index, e.reset_id, e.episode_len) for e in ran) == sorted(
        (e["env_index"], e["reset_id"], e["length"]) for e in finished)
    for e in ran:
        (entry,) = [s for s in finished if s["env_index"] == e.env_index and s["reset_id"] == e.reset_id]
        assert entry["return"] == pytest.approx(e.episode_return, rel=1e-5) and entry["failed"] is False
        assert entry["instruction"] == "stack the red cube on the green cube" and entry["task_id"] == "StackCube-v1"
    env0 = [(e["frame_start"], e["frame_end"], e["finished"]) for e in side["episodes"] if e["env_index"] == 0]
    assert env0 == [(0, 5, True), (5, 9, False)]


@pytest.mark.maniskill
def test_auto_reset_at_the_last_chunk_boundary_leaves_a_one_frame_stub(tmp_path):
    """How every default training video ends: the episode lasts exactly the rollout, so it ends at
    the last chunk boundary, auto-resets, and the rollout end cuts the new one before its first
    action. The sidecar says so (length 0, one frame) and the review page flags it as a stub."""
    cfg = EnvConfig(
        env_type="maniskill", task_description="pick up the red cube", max_episode_steps=4, auto_reset=True,
        seed=1, init_params={"id": "PickCube-v1", "camera_heights": 64, "camera_widths": 64},
        video_cfg=VideoConfig(save_video=True, video_base_dir=str(tmp_path / "unused"), fps=10),
    )
    env = make_env(cfg, 1, video_dir=str(tmp_path / "video" / "train"))
    try:
        env.begin_video(global_step=1, policy_version=1, mode="train", run_name="stub-test")
        env.reset()
        ran = [e for _ in range(2) for e in env.chunk_step(np.zeros((1, 2, 7), np.float32)).episodes]
        path = env.end_video()
    finally:
        env.close()
    assert [e.episode_len for e in ran] == [4]
    side = load_sidecar(Path(path).with_suffix(".json"))
    assert side.warnings == [] and side.num_frames == 6 == iio.imread(path).shape[0]
    first, cut = side.episodes
    assert (first.finished, first.length, first.frame_start, first.frame_end, first.stub) == (True, 4, 0, 5, False)
    assert (cut.finished, cut.length, cut.frame_start, cut.frame_end, cut.stub) == (False, 0, 5, 6, True)


def test_grid_layout_and_even_dimensions(tmp_path):
    """Three 30x30 envs without overlay -> a 2x2 grid of 30x30 tiles padded to even size."""
    rec = VideoRecorder(str(tmp_path), fps=5, info_on_video=False, tag="worker0_stage1", simulator="maniskill", stage=1)
    rec.begin(0, 0, "eval", "grid")
    colors = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)
    for i in range(3):
        rec.episode_start(i, "T", "do it", reset_id=i)
    for _ in range(4):
        imgs = np.broadcast_to(colors[:, None, None, :], (3, 30, 30, 3)).copy()
        obs = EnvObservation(main_images=imgs, states=np.zeros((3, 2), np.float32), task_descriptions=["do it"] * 3)
        rec.add_frame(obs, np.zeros(3, np.float32), np.zeros(3, bool), np.ones(3, np.int64))
    path = rec.end()
    frames = iio.imread(path)
    assert grid_shape(3) == (2, 2) and frames.shape == (4, 60, 60, 3)
    # tiles in row-major order (yuv420p blurs colour edges: check tile centres)
    assert frames[0, 15, 15].argmax() == 0 and frames[0, 15, 45].argmax() == 1 and frames[0, 45, 15].argmax() == 2
    side = json.loads((tmp_path / "step_000000" / "worker0_stage1.json").read_text())
    assert side["mode"] == "eval" and side["stage"] == 1 and len(side["episodes"]) == 3
    assert all(not e["finished"] and (e["frame_start"], e["frame_end"]) == (0, 4) for e in side["episodes"])
    assert not list(tmp_path.rglob("*.tmp"))
