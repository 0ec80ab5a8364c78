"""Run the real CLI in a subprocess (as a user would) and read what a run wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
