"""Run the real CLI in a subprocess (as a user would) and read what a run wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def _cli(args: tuple[str, ...], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = _cli(args, cwd, 1500)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def run_cli_failing(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI expecting a failure; the caller checks the exit code and the message."""
    proc = _cli(args, cwd, 600)
    assert proc.returncode != 0, f"{args} unexpectedly succeeded:\n{proc.stderr[-3000:]}"
    return proc


def read_metrics(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): r for r in rows}


# Frames are compared as means over 16x16-pixel blocks: H.264 rate control makes two encodes of
# the same picture differ by a few levels per pixel (largest block difference measured: 3 of
# 255), while a gripper in another place moves whole blocks (measured: 60-100 after two chunks).
BLOCK, SAME_PICTURE, MOVED = 16, 10.0, 30.0


def eval_recordings(run: Path) -> dict[str, tuple[list[int], Any]]:
    """Eval video tag -> (reset ids of its episodes, decoded frames float32 [T, H, W, 3])."""
    import imageio.v3 as iio
    import numpy as np

    out = {}
    for video in sorted((run / "video" / "eval").rglob("*.mp4")):
        side = json.loads(video.with_suffix(".json").read_text())
        reset_ids = [e["reset_id"] for e in sorted(side["episodes"], key=lambda e: e["env_index"])]
        out[video.stem] = (reset_ids, iio.imread(video).astype(np.float32))
    return out


def block_diff(a, b) -> float:
    """Largest difference between the BLOCK x BLOCK means of two frames [H, W, 3]."""
    h, w = a.shape[0] // BLOCK * BLOCK, a.shape[1] // BLOCK * BLOCK
    means = [x[:h, :w].reshape(h // BLOCK, BLOCK, w // BLOCK, BLOCK, 3).mean(axis=(1, 3)) for x in (a, b)]
    return float(abs(means[0] - means[1]).max())
