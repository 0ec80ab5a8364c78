"""benchmarks/ppo_rgb_baseline.py (the pixel-PPO anchor in ManiSkill's ppo_rgb style) end to end at
its smallest size: 2 recorded demos, 5 BC steps, 2 PPO updates of one 10-step episode, evaluated
on 4 of the held-out reset ids our evaluations use. The numbers themselves are the benchmark's."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runs import record_demos

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

REPO = Path(__file__).resolve().parents[1]
DEMOS = "demos/push_cube_64"  # the recording tests/test_learning.py shares (same command)


def test_minimal_baseline_runs(tmp_path: Path) -> None:
    record_demos("maniskill_sft_tiny", 2, DEMOS, cwd=tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ppo_rgb_baseline.py"), "--minimal", "--seed", "0",
                           "--demos", str(tmp_path / DEMOS), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = json.loads((out / "results.json").read_text())
    assert r["demos"]["episodes"] == 2 and r["bc"]["steps"] == 5
    assert [e["env_steps"] for e in r["evals"]] == [0, 10, 20]
    assert all(0.0 <= e["success_once"] <= 1.0 and e["episodes"] == 4 for e in r["evals"])
    # the first eval epoch of our benchmark's held-out ids: eval split seeds, 4 sub-envs
    (ids,) = r["setting"]["eval_reset_ids"]
    assert len(ids) == 4 and all(2**30 <= i < 2**31 - 1 for i in ids)
    assert r["throughput"]["ratio"] > 0 and "ratio" in proc.stdout
    assert "| env steps |" in proc.stdout
