"""The learning recipe (benchmarks/learning.py) end to end at its smallest size: 2 demos, one SFT
step, export, then one PPO step from the SFT policy, evaluated before and after, through the
real CLI (the GRPO phase is the same call with maniskill_grpo_tiny, which
tests/test_shipped_configs.py trains). The numbers themselves are the benchmark's
(docs/LEARNING.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rl.demos import read_manifest
from tests.cli_runs import share_demos

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

REPO = Path(__file__).resolve().parents[1]
DEMOS = "demos/push_cube_64"


def test_minimal_recipe_runs_through_the_real_code_path(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "learning.py"), "--seeds", "0", "--minimal", "--algos", "ppo",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (result,) = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [s for s, *_ in result["sft_evals"]] == [1]
    assert "grpo_evals" not in result
    assert [s for s, *_ in result["ppo_evals"]] == [0, 1]  # before the first update, after the last
    assert all(0.0 <= success <= 1.0 and episodes >= 1 for _, success, _, episodes, _ in result["ppo_evals"])
    assert (tmp_path / "learning.png").stat().st_size > 10_000
    assert "| PPO after |" in proc.stdout and "GRPO" not in proc.stdout
    # --minimal recorded its demos with `embodied-rl demos maniskill_sft_tiny --num-demos 2 --out
    # demos/push_cube_64 --quiet`: the recording tests/test_shipped_configs.py needs.
    assert len(read_manifest(tmp_path / DEMOS).episodes) == 2
    share_demos("maniskill_sft_tiny", 2, DEMOS, cwd=tmp_path)
