"""Training with a KL reference through the real CLI: real Ray workers, real ManiSkill (64 px),
the real tiny OFT model under LoRA, so the reference is the rollout policy with its adapters
switched off. Two 2-step PPO runs that differ only in algorithm.kl_beta:
  loss:   use_kl_loss=true                 -> the KL loss is 0 before the first update, > 0 after
  shaped: use_kl_loss=true, kl_beta > 0    -> same rollouts as `loss`, lower shaped rewards and
                                              return targets once the policy moved from the reference
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.cli_runs import read_metrics, run_cli
from tests.tiny_runs import EVAL_64, tiny_run

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

def config(out: Path, model: Path) -> str:
    return tiny_run(out, model, {
        "runner": {"experiment_name": "kl", "seed": 3},
        # low_var_kl (k3) >= 0: a moved policy gives a strictly positive KL
        "algorithm": {"update_epoch": 1, "use_kl_loss": True, "kl_loss_coef": 0.1, "kl_penalty": "low_var_kl"},
        "env": {"train": {"total_num_envs": 2}, "eval": {**EVAL_64, "total_num_envs": 2}},
        "rollout": {"pipeline_stage_num": 1},
        "actor": {"global_batch_size": 4, "optim": {"lr": 1.0e-3}, "model": {"is_lora": True, "lora_rank": 4}},
    })


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[int, dict]]:
    root = tmp_path_factory.mktemp("kl")
    path = root / "kl.yaml"
    path.write_text(config(root / "runs", root / "tiny-oft"))
    run_cli("train", str(path), "runner.experiment_name=loss", cwd=root)
    run_cli("train", str(path), "runner.experiment_name=shaped", "algorithm.kl_beta=10.0", cwd=root)
    return {name: read_metrics(root / "runs" / name) for name in ("loss", "shaped")}


def test_kl_loss_is_zero_at_the_start_and_grows_once_the_policy_moves(runs):
    m = runs["loss"]
    assert sorted(m) == [1, 2]
    kl = [m[step]["train/actor/kl_loss"] for step in (1, 2)]
    assert all(math.isfinite(k) and k >= 0 for k in kl)
    # Step 1 scores the rollout policy before any update: it is the reference (adapters off, B = 0).
    assert kl[0] < 1e-6, kl
    # Step 2 runs after one update of the adapters; a reference that followed training would give ~0 again.
    assert kl[1] > 100 * max(kl[0], 1e-9), kl


def test_kl_beta_shapes_rewards_only_once_the_policy_moved(runs):
    loss, shaped = runs["loss"], runs["shaped"]
    # rollout/reward_per_step is the processed reward the estimator saw: with kl_beta, after shaping.
    # Step 1: policy == reference, so shaping subtracts exactly nothing and both runs agree.
    for key in ("rollout/reward_per_step", "rollout/return_target_mean", "rollout/logprob_mean", "train/actor/kl_loss"):
        assert shaped[1][key] == pytest.approx(loss[1][key], abs=1e-6), key
    # Step 2: the same rollout (same weights, same sampler stream) ...
    assert shaped[2]["rollout/logprob_mean"] == pytest.approx(loss[2]["rollout/logprob_mean"], abs=1e-6)
    # ... but rewards minus kl_beta * KL(policy || reference) > 0, so lower rewards and value targets.
    for key in ("rollout/reward_per_step", "rollout/return_target_mean"):
        assert shaped[2][key] < loss[2][key] - 1e-4, key
