"""PPO end to end with rollout.backend=vllm: real ManiSkill (CPU render, 64 px), the tiny
OpenVLA-OFT, real Ray workers, an FSDP2 actor over gloo and the vLLM engine inside the
rollout worker. Two PPO steps, a checkpoint after each (the config of test_runtime_e2e.py, on one
slot: one env worker with its 4 sub-envs, one actor rank, the rollout worker; the test is about
the rollout backend, the 2-rank actor is test_runtime_e2e.py's).

Why the PPO ratio checks the weight sync: with update_epoch 1 and the whole rollout batch (4 envs
x 2 chunk steps) as one global batch, every log-prob the actor computes comes before its only
optimizer step, so it scores the very weights the rollout workers were sent. The ratio actor/rollout is then 1 up to
the backends' float differences only if the engine acted with those weights, at step 2 too,
i.e. after a sync of step 1's update. The offline check measures how far step 1 moved the
policy (what a missed sync would have shown instead) and that the engine loaded with step 1's
weights acts as the HF policy loaded with them does.
"""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_runs import ALL_ON_ONE_SLOT, read_metrics, run_cli
from tests.test_runtime_e2e import config as e2e_config

pytest.importorskip("vllm")
pytestmark = [pytest.mark.slow, pytest.mark.maniskill, pytest.mark.vllm]

TOL = 1e-4


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory) -> Path:
    """The HF end-to-end test's config (its one optimizer step per training step included) with the vLLM backend, on one slot."""
    root = tmp_path_factory.mktemp("vllm_e2e")
    config = root / "e2e.yaml"
    config.write_text(e2e_config(root / "runs", root / "tiny-oft"))
    before = _engine_dirs()
    run_cli("train", str(config), *ALL_ON_ONE_SLOT, "runner.experiment_name=vllm", "rollout.backend=vllm", "algorithm.update_epoch=1",
            "env.train.video_cfg.save_video=false", "env.eval.video_cfg.save_video=false", cwd=root)
    (root / "engine_dirs_left.txt").write_text("\n".join(sorted(_engine_dirs() - before)))
    return root / "runs" / "vllm"


def _engine_dirs() -> set[str]:
    """The engine directories VLLMOpenVLAOFT makes in the temporary directory (config + weight links)."""
    return {p.name for p in Path(tempfile.gettempdir()).glob("oft_vllm_*")}


def test_two_ppo_steps_train_with_the_vllm_rollout(vllm_run: Path):
    metrics = read_metrics(vllm_run)
    assert sorted(metrics) == [1, 2]
    for row in metrics.values():
        assert math.isfinite(row["train/actor/total_loss"]) and math.isfinite(row["train/critic/value_loss"])
        assert row["env/num_trajectories"] > 0
        assert row["train/actor/optimizer_steps"] == 1.0
    from embodied_rl.workers.actor.checkpoint import has_trainable_weights

    assert has_trainable_weights(vllm_run / "checkpoints" / "global_step_00000002" / "actor")


def test_the_run_leaves_no_engine_directory(vllm_run: Path):
    """A finished run leaves no engine directory behind (the rollout worker closes its engine)."""
    assert (vllm_run.parents[1] / "engine_dirs_left.txt").read_text() == ""


def test_rollout_log_probs_come_from_the_synced_weights(vllm_run: Path):
    """Step 2's rollout ran after the sync of step 1's update: its log-probs equal the actor's."""
    for step, row in read_metrics(vllm_run).items():
        assert abs(row["train/actor/ratio_mean"] - 1.0) < TOL, (step, row["train/actor/ratio_mean"])
        assert abs(row["train/actor/ratio_max"] - 1.0) < TOL, (step, row["train/actor/ratio_max"])
        assert row["train/actor/approx_kl"] < 1e-8, (step, row["train/actor/approx_kl"])


def test_synced_weights_change_the_engines_actions_as_they_change_hf(vllm_run: Path):
    from embodied_rl.config.loader import read_yaml
    from embodied_rl.configure import config_from_dict
    from embodied_rl.models.openvla_oft.vllm.engine import VLLMOpenVLAOFT
    from embodied_rl.models.registry import build_policy
    from embodied_rl.types import EnvObservation
    from embodied_rl.workers.actor.checkpoint import read_trainable_weights

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    model_cfg = config_from_dict(read_yaml(vllm_run / "config.yaml"), plan=False).actor.model
    step1 = read_trainable_weights(vllm_run / "checkpoints" / "global_step_00000001" / "actor")
    rng = np.random.default_rng(0)
    obs = EnvObservation(main_images=rng.integers(0, 256, (8, 64, 64, 3), dtype=np.uint8),
                         states=rng.uniform(-1, 1, (8, model_cfg.proprio_dim)).astype(np.float32),
                         task_descriptions=["pick up the red cube"] * 8)
    hf = build_policy(model_cfg, device="cpu", warn_untrained_value_head=False, init_seed=7).eval()
    engine = VLLMOpenVLAOFT(model_cfg.model_path, model_cfg, init_seed=7)
    try:
        inputs = hf.prepare_inputs(obs)
        before = engine.predict(inputs, do_sample=False)
        with torch.no_grad():
            hf_before = hf.predict(inputs, do_sample=False)
        hf.load_trainable_state_dict(step1)
        engine.load_trainable_state_dict(step1)
        after = engine.predict(inputs, do_sample=False)
        with torch.no_grad():
            hf_after = hf.predict(inputs, do_sample=False)
            rescored = hf.evaluate_actions(inputs, before.action_record, compute_values=False)["logprobs"]
    finally:
        engine.close()
    assert torch.equal(before.action_record, hf_before.action_record)
    assert not torch.equal(after.action_record, before.action_record)
    assert torch.equal(after.action_record, hf_after.action_record)
    assert (after.logprobs - hf_after.logprobs).abs().max() < TOL
    # What a rollout with stale weights would have recorded differs from the synced policy by far
    # more than the ratio tolerance above.
    assert (rescored - before.logprobs).abs().max() > 100 * TOL
