"""`embodied-rl eval --compare A B` of two different policies through the real CLI: the shipped
SFT policy (a model directory) against a freshly created tiny preset, on PushCube
(maniskill_ppo_from_sft), one eval epoch of the 4 held-out states of env.eval.seed=1 (states
on which the SFT policy succeeds greedily) on one slot, greedy scoring only (the sampled pass would double
the test's time; both scorings of a comparison, of a checkpoint with itself, are in
tests/test_runtime_e2e.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rl.envs.reset_split import EVAL_SEEDS_START
from embodied_rl.evaluation.intervals import format_rate, mcnemar_exact, wilson_interval
from tests.cli_runs import ONE_SLOT, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

SFT = Path(__file__).resolve().parents[1] / "models" / "tiny-oft-push-cube-sft"


def test_compare_two_policies_counts_match_the_paired_episodes(tmp_path: Path) -> None:
    run_cli("make-model", "tiny", "models/tiny-fresh", "--image-size", "64", "--seed", "1", cwd=tmp_path)
    # One env worker with the 4 sub-envs two would have: the reset ids are spread over the
    # sub-envs, not the workers, so the episodes are the same with half the worker processes.
    proc = run_cli("eval", "maniskill_ppo_from_sft", ONE_SLOT, "env.eval.total_num_envs=4", "runner.experiment_name=cmp",
                   "algorithm.eval_rollout_epoch=1", "env.eval.seed=1", "algorithm.sampling_params.eval_scoring=[greedy]",
                   "--compare", str(SFT), "models/tiny-fresh", cwd=tmp_path)
    run = tmp_path / "runs" / "cmp"
    report = json.loads((run / "comparison.json").read_text())
    assert report["policies"]["A"] == {"path": str(SFT), "kind": "model", "resolved": str(SFT)}
    assert report["policies"]["B"]["resolved"] == str(tmp_path / "models" / "tiny-fresh")
    episodes = report["episodes"]
    ids = [e["reset_id"] for e in episodes]
    assert len(ids) == len(set(ids)) == 4 and min(ids) >= EVAL_SEEDS_START  # held-out states, one per sub-env
    assert sorted(ids) == json.loads((run / "reset_ids.json").read_text())["eval"]["ids"]
    assert report["scorings"] == ["greedy"] and list(report["results"]) == ["greedy"]
    for scoring in report["scorings"]:
        a = [e["A"][scoring]["success_once"] for e in episodes]
        b = [e["B"][scoring]["success_once"] for e in episodes]
        r = report["results"][scoring]
        only_a, only_b = sum(x and not y for x, y in zip(a, b)), sum(y and not x for x, y in zip(a, b))
        assert (r["n"], r["A"]["successes"], r["B"]["successes"]) == (4, sum(a), sum(b))
        assert (r["only_a"], r["only_b"], r["mcnemar_p"]) == (only_a, only_b, mcnemar_exact(only_a, only_b))
        assert (r["A"]["ci95_low"], r["A"]["ci95_high"]) == pytest.approx(wilson_interval(sum(a), 4))
        # Each side's evaluation metrics are the ones its episodes give.
        assert report["metrics"]["A"][f"eval/{scoring}/success_once"] == pytest.approx(sum(a) / 4)
        assert report["metrics"]["B"][f"eval/{scoring}/num_trajectories"] == 4
        assert f"  A {SFT}  {format_rate(sum(a), 4)}" in proc.stdout
        assert f"discordant pairs: {only_a} only A, {only_b} only B" in proc.stdout
    # The SFT policy solves a state the untrained preset does not (measured: 1 of the 4, greedy).
    assert report["results"]["greedy"]["only_a"] >= 1
