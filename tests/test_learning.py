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

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

REPO = Path(__file__).resolve().parents[1]


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
