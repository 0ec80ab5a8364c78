"""`embodied-rl eval` acts with the weights `runner.ckpt_path` points at.

One short PPO run of the shipped default config (real ManiSkill, the tiny OpenVLA-OFT at 64 px,
real Ray workers) with a large learning rate, so that a single training step moves the greedy
actions. Then the same eval config twice, greedy, on the same fixed reset ids: once with
`runner.ckpt_path=<run>/checkpoints/global_step_N`, once without. Both recordings start from
the same initial states (same reset ids, same first frame), and what the robot does afterwards
differs: the rendered frames after the first action chunk are not the same.
"""
from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from cli_runs import read_metrics, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

CONFIG = "maniskill_ppo_tiny"
# Two chunk steps of 8 actions per episode, 4 envs: 8 samples, one PPO minibatch.
SHORT = ("env.train.max_episode_steps=16", "env.eval.max_episode_steps=16",
         "actor.global_batch_size=8", "actor.micro_batch_size=4")
# Frames are compared as means over 16x16-pixel blocks: H.264 rate control makes two encodes of
# the same picture differ by a few levels per pixel (largest block difference measured: 3 of
# 255), while a gripper in another place moves whole blocks (measured: 60-100 after two chunks).
BLOCK, SAME_PICTURE, MOVED = 16, 10.0, 30.0


def _common(root: Path) -> tuple[str, ...]:
    return (f"runner.output_dir={root / 'runs'}", f"actor.model.model_path={root / 'tiny-oft'}", *SHORT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("eval_ckpt")


@pytest.fixture(scope="module")
def checkpoint(workdir: Path) -> Path:
    """One PPO step at lr 1e-2 (the default 1e-4 barely moves the LoRA weights in one step)."""
    run_cli("train", CONFIG, *_common(workdir), "runner.experiment_name=train", "runner.max_steps=1",
            "runner.save_interval=1", "actor.optim.lr=1.0e-2", cwd=workdir)
    latest = (workdir / "runs" / "train" / "checkpoints" / "latest").read_text().strip()
    return workdir / "runs" / "train" / "checkpoints" / latest


def _eval(workdir: Path, name: str, *extra: str) -> Path:
    run_cli("eval", CONFIG, *_common(workdir), f"runner.experiment_name={name}",
            "algorithm.sampling_params.do_sample_eval=false", *extra, cwd=workdir)
    return workdir / "runs" / name


def _recordings(run: Path) -> dict[str, tuple[list[int], np.ndarray]]:
    """Eval video tag -> (reset ids of its episodes, decoded frames [T, H, W, 3])."""
    out = {}
    for video in sorted((run / "video" / "eval").rglob("*.mp4")):
        side = json.loads(video.with_suffix(".json").read_text())
        reset_ids = [e["reset_id"] for e in sorted(side["episodes"], key=lambda e: e["env_index"])]
        out[video.stem] = (reset_ids, iio.imread(video).astype(np.float32))
    return out


def _block_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference between the 16x16-block means of two frames [H, W, 3]."""
    h, w = a.shape[0] // BLOCK * BLOCK, a.shape[1] // BLOCK * BLOCK
    means = [x[:h, :w].reshape(h // BLOCK, BLOCK, w // BLOCK, BLOCK, 3).mean(axis=(1, 3)) for x in (a, b)]
    return float(np.abs(means[0] - means[1]).max())


def test_ckpt_path_changes_the_actions_taken(workdir: Path, checkpoint: Path):
    with_ckpt = _eval(workdir, "with_ckpt", f"runner.ckpt_path={checkpoint}")
    without = _eval(workdir, "without_ckpt")
    for run in (with_ckpt, without):
        (row,) = read_metrics(run).values()
        assert row["eval/num_trajectories"] == 4
    a, b = _recordings(with_ckpt), _recordings(without)
    assert sorted(a) == sorted(b) and a, (sorted(a), sorted(b))
    moved = {}
    for tag in a:
        (ids_a, frames_a), (ids_b, frames_b) = a[tag], b[tag]
        assert ids_a == ids_b, f"{tag}: the two evals started from different reset ids"
        assert frames_a.shape == frames_b.shape
        # Same initial state: the reset frame is the same picture in both runs.
        assert _block_diff(frames_a[0], frames_b[0]) < SAME_PICTURE, tag
        moved[tag] = max(_block_diff(x, y) for x, y in zip(frames_a[1:], frames_b[1:]))
    # Different weights, different greedy actions: the robot ends up elsewhere in the videos.
    assert max(moved.values()) > MOVED, moved
