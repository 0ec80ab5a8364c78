"""SFT through the real code path: `embodied-rl demos` -> `embodied-rl sft` -> `embodied-rl export`
-> the exported policy acting closed-loop in real ManiSkill3 (PushCube-v1, 64 px, CPU sim).

One demonstration is recorded once for the module; the overfit run (Ray, FSDP2 actor ranks,
eval rollouts with videos) is shared by the tests that read what it wrote.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from embodied_rl.algorithms.sft import sft_loss
from embodied_rl.demos import read_manifest
from embodied_rl.demos.sft_data import EpochSampler
from tests.cli_runs import (
    ONE_SLOT,
    check_eval_only,
    read_metrics,
    run_cli,
    run_cli_failing,
)

pytestmark = [pytest.mark.maniskill]

CONFIG = "maniskill_sft_tiny"
DEMOS = "demos/one"
# Measured: 12 samples, full batch, lr 2e-3 reach token probability ~0.97 in 300 steps. One slot:
# the tests are about what SFT learns and writes, not ranks (test_actor_fsdp.py covers 2 ranks).
OVERFIT = [ONE_SLOT, "runner.max_steps=300", "actor.global_batch_size=12", "actor.optim.lr=2e-3", "runner.val_check_interval=150",
           f"data.train_data_paths=[{DEMOS}]", "runner.experiment_name=overfit",
           "algorithm.sampling_params.eval_scoring=[greedy]"]  # what the tests compare (the sampled pass would double eval time)


# ---------------------------------------------------------------- pure parts


def test_sft_loss_is_the_masked_token_nll() -> None:
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.1], [1.0, 0.5, 0.01]]))
    mask = torch.tensor([[True, True, False], [True, False, False]])
    loss, metrics = sft_loss(logprobs, mask)
    expected = -(math.log(0.5) + math.log(0.25) + math.log(1.0)) / 3
    assert loss.item() == pytest.approx(expected)
    assert metrics["sft/expert_prob"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)


def test_epoch_sampler_visits_every_sample_once_per_epoch_and_resumes() -> None:
    sampler = EpochSampler(10, torch.Generator().manual_seed(0))
    drawn = torch.cat([sampler.next(4) for _ in range(5)])  # 20 = two epochs
    assert sorted(drawn[:10].tolist()) == list(range(10)) and sorted(drawn[10:].tolist()) == list(range(10))
    assert sampler.epoch == 1
    state = sampler.state_dict()
    after = [sampler.next(3) for _ in range(4)]
    again = EpochSampler(10, torch.Generator().manual_seed(99))
    again.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(after, [again.next(3) for _ in range(4)]))


def test_demos_of_several_tasks_keep_each_samples_instruction_and_share_one_statistics_entry() -> None:
    from embodied_rl.demos.reader import DemoChunks
    from embodied_rl.demos.sft_data import concat_chunks, statistics_key

    def chunks(n: int, instruction: str) -> DemoChunks:
        return DemoChunks(main_images=np.zeros((n, 8, 8, 3), np.uint8), wrist_images=None, states=np.zeros((n, 9), np.float32),
                          actions=np.zeros((n, 2, 7), np.float32), action_mask=np.ones((n, 2), bool),
                          episode_index=np.zeros(n, np.int64), step_index=np.arange(n), instructions=[instruction] * n, manifest=None)

    both = concat_chunks([chunks(2, "push"), chunks(3, "pick")])
    assert both.instructions == ["push", "push", "pick", "pick", "pick"] and both.episode_index.tolist() == [0, 0, 1, 1, 1]
    assert statistics_key(["PushCube-v1"]) == "PushCube-v1"
    assert statistics_key(["PushCube-v1", "PickCube-v1", "PushCube-v1"]) == "PushCube-v1+PickCube-v1"


def test_action_noise_re_bins_the_expert_actions_around_their_own_bins() -> None:
    from embodied_rl.demos.sft_data import SFTSamples
    from embodied_rl.models.openvla_oft.actions import ActionTokenizer

    tok = ActionTokenizer(base_vocab_size=1000)
    actions = torch.tensor([[-0.5, 0.0, 0.25, 1.0]] * 2000, dtype=torch.float64)
    samples = SFTSamples({"x": torch.zeros(2000, 1)}, tok.encode(actions), torch.ones(2000, 4, dtype=torch.bool),
                         actions=actions, record=tok.encode)
    index = torch.arange(2000)
    _, exact, _ = samples.select(index)
    assert torch.equal(exact, tok.encode(actions))
    _, noisy, _ = samples.select(index, torch.randn(2000, 4, generator=torch.Generator().manual_seed(0)) * 0.05)
    shift = (noisy - exact).double()
    # 0.05 of the range is 6.4 bins: centred on the expert's bin with about that spread; the clamp
    # keeps +1 at the edge bin, so that dimension only moves one way
    assert shift[:, :3].mean(0).abs().max() < 0.5 and shift[:, :3].std(0).sub(6.4).abs().max() < 0.5
    assert (shift[:, 3] >= 0).all() or (shift[:, 3] <= 0).all()
    with pytest.raises(ValueError, match="no actions"):
        SFTSamples({"x": torch.zeros(2, 1)}, exact[:2], torch.ones(2, 4, dtype=torch.bool)).select(index[:2], shift[:2])


# ---------------------------------------------------------------- the real path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A working directory as a user's checkout: demos/, models/ and runs/ are made in it."""
    cwd = tmp_path_factory.mktemp("sft")
    run_cli("demos", CONFIG, "--num-demos", "1", "--out", DEMOS, "--workers", "1", "--quiet", cwd=cwd)
    return cwd


@pytest.fixture(scope="module")
def overfit_run(work):
    run_cli("sft", CONFIG, *OVERFIT, cwd=work)
    return work / "runs" / "overfit"


@pytest.mark.slow
def test_sft_loss_falls_and_the_run_evaluates_like_rl(overfit_run, work) -> None:
    metrics = read_metrics(overfit_run)
    assert sorted(metrics) == list(range(1, 301))
    first, last = metrics[1]["train/sft/nll"], metrics[300]["train/sft/nll"]
    assert last < 0.1 * first, (first, last)
    assert metrics[300]["train/sft/expert_prob"] > 0.8
    # Periodic evaluation with videos, after the weights reached the rollout workers.
    for step in (150, 300):
        assert 0.0 <= metrics[step]["eval/success_once"] <= 1.0
        assert list((overfit_run / "video" / "eval" / f"step_{step:06d}").glob("*.mp4"))
    # The statistics the policy acts with are the demos' (OpenVLA's dataset_statistics entry).
    ckpt = overfit_run / "checkpoints" / "global_step_00000300"
    stats = json.loads((ckpt / "dataset_statistics.json").read_text())
    assert stats == {"PushCube-v1": read_manifest(work / DEMOS).statistics}


@pytest.mark.slow
def test_sft_policy_reproduces_its_demo_closed_loop(overfit_run, work) -> None:
    """The policy trained by `embodied-rl sft` on one demonstration, exported as a
    plain model, solves that demo's initial state (its reset id) acting greedily in the env."""
    from embodied_rl.configure import load_config
    from embodied_rl.demos.recorder import DemoRecorder
    from embodied_rl.demos.spec import DemoSpec
    from embodied_rl.envs.action_adapter import ActionAdapter
    from embodied_rl.models import build_policy
    from embodied_rl.types import EnvObservation

    run_cli("export", "runs/overfit", "models/sft-one", cwd=work)
    cfg = load_config(CONFIG, [f"actor.model.model_path={work / 'models/sft-one'}", "actor.model.create_preset=null"],
                      plan=False, skip=("sft_data",))
    policy = build_policy(cfg.actor.model, device="cpu").eval()
    assert policy.unnorm_key == "PushCube-v1"
    episode = read_manifest(work / DEMOS).episodes[0]
    recorder = DemoRecorder(DemoSpec.from_config(cfg))
    try:
        env, adapter = recorder.sub_env, ActionAdapter(cfg.env.train.action_adapter, 7)
        obs, terminated, success, steps = recorder.sub_env.reset(episode.reset_id), False, False, 0
        while not terminated and steps < cfg.env.train.max_episode_steps:
            batch = EnvObservation(main_images=obs["main_image"][None], states=obs["state"][None].astype(np.float32),
                                   task_descriptions=[cfg.env.train.task_description])
            with torch.no_grad():
                chunk = policy.predict(policy.prepare_inputs(batch), do_sample=False).actions[0].numpy()
            for action in chunk:
                obs, _, terminated, success = env.step(adapter(action))
                steps += 1
                if terminated:
                    break
    finally:
        recorder.close()
    assert terminated and success, f"no success on reset id {episode.reset_id} after {steps} steps"


@pytest.mark.slow
def test_eval_of_the_sft_checkpoint_reproduces_its_last_evaluation(overfit_run, work) -> None:
    """runner.ckpt_path of an SFT run brings its statistics along: evaluated alone, greedy on the
    same fixed reset ids, the checkpoint scores exactly what the run's own last evaluation did.
    Also the eval-only run of tests/test_shipped_configs.py for maniskill_sft_tiny: the shipped
    config's scorings, videos and environment facts."""
    run_cli("eval", CONFIG, f"data.train_data_paths=[{DEMOS}]", "runner.experiment_name=overfit_eval",
            "runner.ckpt_path=runs/overfit", ONE_SLOT, cwd=work)
    alone = check_eval_only(work / "runs" / "overfit_eval")
    last = read_metrics(overfit_run)[300]
    for key in ("eval/success_once", "eval/return", "eval/episode_len"):
        assert alone[key] == pytest.approx(last[key]), key


@pytest.mark.slow
def test_checkpoint_policy_acts_as_the_exported_policy(overfit_run, work, tmp_path, monkeypatch) -> None:
    """The in-process policy of a checkpoint (what replay scripts use) carries the run's config,
    weights and demo statistics: its greedy actions equal the exported plain model's."""
    monkeypatch.chdir(work)  # the run's relative paths (model_path) resolve where it ran, as for the CLI
    from embodied_rl.models import build_policy
    from embodied_rl.replay import checkpoint_policy
    from embodied_rl.runtime.checkpoint import export_policy
    from embodied_rl.types import EnvObservation

    ckpt = overfit_run / "checkpoints" / "global_step_00000300"
    cfg, policy = checkpoint_policy(ckpt)
    assert cfg.runner.paradigm == "sft" and cfg.runner.max_steps == 300
    _, from_run_dir = checkpoint_policy(overfit_run)  # a run directory means its latest checkpoint
    exported = build_policy(dataclasses.replace(cfg.actor.model, model_path=str(export_policy(ckpt, cfg.actor.model, tmp_path / "m")),
                                                create_preset=None), device="cpu").eval()
    gen = torch.Generator().manual_seed(0)
    obs = EnvObservation(main_images=torch.randint(0, 256, (2, 64, 64, 3), generator=gen, dtype=torch.uint8).numpy(),
                         states=torch.randn(2, 8, generator=gen).numpy(), task_descriptions=[cfg.env.train.task_description] * 2)
    with torch.no_grad():
        acts = [p.predict(p.prepare_inputs(obs), do_sample=False).actions for p in (policy, from_run_dir, exported)]
    assert torch.equal(acts[0], acts[2]) and torch.equal(acts[1], acts[2])
    assert exported.unnorm_key == "PushCube-v1"


@pytest.mark.slow
def test_demos_of_another_task_are_refused_before_anything_starts(work) -> None:
    proc = run_cli_failing("sft", CONFIG, f"data.train_data_paths=[{DEMOS}]", "env.train=maniskill_pick_cube",
                           "runner.experiment_name=wrong_task", cwd=work)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (f"error: data.train_data_paths[0]: {DEMOS}/manifest.json: demos have task PushCube-v1, "
                        "expected PickCube-v1")
    assert not (work / "runs" / "wrong_task").exists()


# ---------------------------------------------------------------- demos during RL


@pytest.mark.slow
def test_bc_term_clones_the_demos_in_every_policy_step_of_rl(work, tmp_path, monkeypatch) -> None:
    """algorithm.bc_coef: an RL training step also fits the demos (their NLL falls step after
    step), not during critic warm-up (policy untouched), and nothing of it without the key."""
    from embodied_rl.configure import load_config
    from embodied_rl.workers.actor import fsdp
    from embodied_rl.workers.actor.worker import ActorWorker
    from tests.actor_fixtures import make_rollout_batch

    monkeypatch.chdir(work)  # data.train_data_paths is relative to the checkout, as for a user
    sizes = ["actor.global_batch_size=8", "actor.micro_batch_size=4", "algorithm.n_minibatches=1", "algorithm.update_epoch=2",
             "runner.critic_warmup=1", "actor.optim.lr=1e-3", "algorithm.reward_norm=none", "algorithm.reward_scale=false"]
    demo_keys = [f"data.train_data_paths=[{DEMOS}]", "algorithm.bc_coef=1.0"]

    def steps(overrides: list[str], n: int) -> tuple[list[dict], list[torch.Tensor]]:
        cfg = load_config("maniskill_ppo_from_sft", [*sizes, *overrides], plan=False)
        batch = make_rollout_batch(cfg)
        worker = ActorWorker(cfg, 0, 1)
        try:
            worker.setup("127.0.0.1", fsdp.free_port())
            if cfg.algorithm.bc_coef > 0:
                assert worker.load_demos() > 0
            policy_weights = lambda: torch.cat([p.detach().full_tensor().flatten() for n_, p in worker.policy.named_parameters()
                                                if "value_head" not in n_])
            metrics, weights = [], [policy_weights()]
            for _ in range(n):
                metrics.append(worker.train_step(batch))
                weights.append(policy_weights())
        finally:
            worker.shutdown()
        return metrics, weights

    with_bc, w_bc = steps(demo_keys, 4)
    assert "train/actor/bc_nll" not in with_bc[0] and torch.equal(w_bc[0], w_bc[1])  # critic warm-up: the policy waits
    nll = [m["train/actor/bc_nll"] for m in with_bc[1:]]
    assert all(math.isfinite(x) for x in nll) and nll[-1] < nll[0], nll
    assert 0 < with_bc[-1]["train/actor/bc_expert_prob"] <= 1
    without, w_plain = steps([], 2)
    assert not any(k.startswith("train/actor/bc_") for k in without[-1])
    assert not torch.equal(w_bc[2], w_plain[2])  # the same rollout batch, the demos' gradient on top
