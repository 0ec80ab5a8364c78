"""Training with a KL reference through the real CLI: real Ray workers, real ManiSkill (64 px),
the real tiny OFT model under LoRA, so the reference is the rollout policy with its adapters
switched off. Two 2-step PPO runs that differ only in algorithm.kl_beta:
  loss:   use_kl_loss=true                 -> the KL loss is 0 before the first update, > 0 after
  shaped: use_kl_loss=true, kl_beta > 0    -> same rollouts as `loss`, lower shaped rewards and
                                              return targets once the policy moved from the reference
"""
from __future__ import annotations

import math

import pytest

from tests.cli_runs import read_metrics, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

CONFIG = """\
defaults:
  - env/maniskill_pick_cube@env.train
  - env/maniskill_pick_cube@env.eval
cluster:
  component_placement:
    actor: 0
    env: 0
    rollout: 0
runner:
  experiment_name: kl
  output_dir: {out}
  max_steps: 2
  seed: 3
algorithm:
  adv_type: gae
  reward_type: chunk_level
  update_epoch: 1
  use_kl_loss: true
  kl_loss_coef: 0.1
  kl_penalty: low_var_kl   # k3 >= 0: a moved policy gives a strictly positive KL
env:
  train:
    total_num_envs: 2
    auto_reset: true
    max_episode_steps: 16
    init_params: {{camera_heights: 64, camera_widths: 64}}
    video_cfg: {{save_video: false}}
  eval:
    total_num_envs: 2
    max_episode_steps: 16
    init_params: {{camera_heights: 64, camera_widths: 64}}
    video_cfg: {{save_video: false}}
rollout:
  pipeline_stage_num: 1
actor:
  micro_batch_size: 4
  global_batch_size: 4
  optim: {{lr: 1.0e-3}}
  model:
    model_path: {model}
    create_preset: {{name: tiny, image_size: 64}}
    add_value_head: true
    value_type: chunk_level
    is_lora: true
    lora_rank: 4
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[int, dict]]:
    root = tmp_path_factory.mktemp("kl")
    config = root / "kl.yaml"
    config.write_text(CONFIG.format(out=root / "runs", model=root / "tiny-oft"))
    run_cli("train", str(config), "runner.experiment_name=loss", cwd=root)
    run_cli("train", str(config), "runner.experiment_name=shaped", "algorithm.kl_beta=10.0", cwd=root)
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
