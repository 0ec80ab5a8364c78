"""The cnn_gaussian policy family (embodied_rl/models/cnn_gaussian): its Gaussian contract, SFT
on a demo, checkpoints, the errors of a wrong model type or an OFT-only key, and PPO end to end
under Ray through the same actor, rollout, evaluation and videos as OpenVLA-OFT."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied_rl.algorithms.sft import sft_loss
from embodied_rl.config.schema.model import model_config
from embodied_rl.demos.reader import DemoChunks
from embodied_rl.demos.sft_data import build_samples
from embodied_rl.errors import CheckpointError, ConfigError, UserError
from embodied_rl.models.create import create_model
from embodied_rl.models.registry import build_policy
from tests.observations import observations

STATE = 9
CHUNKS = 2


def _cfg(path: Path, **keys):
    return model_config("cnn_gaussian", **{"model_path": str(path), "use_proprio": True, "proprio_dim": STATE, "num_action_chunks": CHUNKS, **keys})


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny convolutions are ~100x slower on 2 threads of a box another job keeps busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """The tiny cnn_gaussian preset at 64 px, 9-D state, chunks of 2 actions."""
    path = tmp_path_factory.mktemp("cnn") / "tiny-cnn"
    create_model("tiny", path, model_type="cnn_gaussian", image_size=64, proprio_dim=STATE, use_proprio=True,
                 model_keys={"num_action_chunks": CHUNKS}, seed=0)
    return path


@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_recorded_logprobs_are_what_evaluate_recomputes(tmp_path, squash):
    path = tmp_path / squash
    create_model("tiny", path, model_type="cnn_gaussian", image_size=64, proprio_dim=STATE, use_proprio=True,
                 model_keys={"num_action_chunks": CHUNKS, "squash": squash})
    policy = build_policy(_cfg(path, squash=squash, add_value_head=True, value_type="action_level"))
    inputs = policy.prepare_inputs(observations(5, size=80, state_dim=STATE))  # 80 px camera resized to the model's 64
    assert inputs["images"].shape == (5, 3, 64, 64) and inputs["images"].dtype == torch.uint8
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=0.7, generator=torch.Generator().manual_seed(1))
        again = policy.evaluate_actions(inputs, out.action_record, temperature=0.7)
        greedy = policy.predict(inputs, do_sample=False)
    width = CHUNKS * 7
    assert out.action_record.shape == out.logprobs.shape == out.entropy.shape == (5, width)
    assert out.actions.shape == (5, CHUNKS, 7) and out.values.shape == (5, CHUNKS)
    torch.testing.assert_close(again["logprobs"], out.logprobs, rtol=0, atol=1e-5)
    torch.testing.assert_close(again["entropy"], out.entropy)
    # the env gets the squashed sample (identity statistics); greedy acts with the squashed mean
    squashed = torch.tanh(out.action_record) if squash == "tanh" else out.action_record.clamp(-1, 1)
    torch.testing.assert_close(out.actions.reshape(5, -1), squashed, rtol=0, atol=1e-6)
    mean = policy.actor_mean(policy._features(inputs))
    torch.testing.assert_close(greedy.action_record, mean)
    # log N(u; mu, sigma) per dimension, with the tanh change of variables where it squashes
    std = policy.log_std.exp() * 0.7
    want = torch.distributions.Normal(mean, std).log_prob(out.action_record)
    if squash == "tanh":
        want = want - torch.log(1 - torch.tanh(out.action_record) ** 2)
    torch.testing.assert_close(out.logprobs, want, rtol=1e-4, atol=1e-4)
    likelihood = policy.evaluate_actions(inputs, out.action_record, temperature=0.7, scoring="likelihood")
    torch.testing.assert_close(likelihood["logprobs"], out.logprobs)  # one Gaussian for rollouts and demos


def test_sft_overfits_one_demo(ckpt):
    """The generic SFT path (records of the normalised demo actions, -evaluate_actions log-probs)
    is the Gaussian NLL: it falls and the mean reaches the demo's actions."""
    torch.manual_seed(0)
    policy = build_policy(_cfg(ckpt))
    obs = observations(1, size=64, state_dim=STATE)
    actions = np.random.default_rng(0).uniform(-0.8, 0.8, (1, CHUNKS, 7)).astype(np.float32)
    demo = DemoChunks(main_images=obs.main_images, wrist_images=None, states=obs.states, actions=actions,
                      action_mask=np.ones((1, CHUNKS), bool), episode_index=np.zeros(1, np.int64), step_index=np.zeros(1, np.int64),
                      instructions=["push"], manifest=None)
    samples = build_samples(policy, demo)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    nll = []
    for _ in range(150):
        inputs, record, mask = samples.select(torch.arange(1))
        loss, metrics = sft_loss(policy.evaluate_actions(inputs, record, compute_values=False)["logprobs"], mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        nll.append(float(metrics["sft/nll"]))
    assert nll[-1] < nll[0] - 0.5, nll[::25]
    with torch.no_grad():
        mean = policy.predict(samples.inputs, do_sample=False).actions
    assert (mean - torch.as_tensor(actions)).abs().max() < 0.05


def test_checkpoint_round_trip(ckpt, tmp_path):
    cfg = _cfg(ckpt, add_value_head=True, value_type="chunk_level")
    policy = build_policy(cfg, init_seed=3)
    with torch.no_grad():  # move every weight off its saved value, statistics too
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    stats = {"push": {"action": {"q01": [-2.0] * 7, "q99": [2.0] * 7, "mask": [True] * 6 + [False]},
                      "proprio": {"q01": [-1.0] * STATE, "q99": [3.0] * STATE}}}
    policy.set_dataset_statistics(stats)
    policy.save_checkpoint(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "config.json", "dataset_statistics.json", "model.safetensors", "value_head.safetensors"]
    loaded = build_policy(_cfg(tmp_path / "saved", add_value_head=True, value_type="chunk_level"), init_seed=99)
    inputs = policy.prepare_inputs(observations(4, size=64, state_dim=STATE))
    with torch.no_grad():
        for do_sample in (False, True):
            a = policy.predict(inputs, do_sample=do_sample, generator=torch.Generator().manual_seed(0))
            b = loaded.predict(loaded.prepare_inputs(observations(4, size=64, state_dim=STATE)), do_sample=do_sample,
                               generator=torch.Generator().manual_seed(0))
            for name in ("actions", "action_record", "logprobs", "entropy", "values"):
                torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["model_type"] == "cnn_gaussian"
    # a checkpoint without a critic gets the same seeded one in every process
    one, two = (build_policy(cfg, init_seed=5) for _ in range(2))
    torch.testing.assert_close(one.value_head.state_dict(), two.value_head.state_dict())
    counts = cfg.parameter_counts()  # the memory plan's count, from the meta-device tree
    assert counts.total == counts.trainable == sum(p.numel() for p in policy.parameters())
    skeleton = type(policy).skeleton(ckpt, cfg, device="cpu")
    assert all(t.is_meta for t in skeleton.state_dict().values())
    assert skeleton.state_dict().keys() == policy.state_dict().keys()


def test_a_checkpoint_of_the_other_type_is_one_line(ckpt, tiny_model):
    from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig

    with pytest.raises(CheckpointError, match="model_type is 'cnn_gaussian', a cnn_gaussian checkpoint, not an openvla_oft one; "
                                              "set actor.model.model_type=cnn_gaussian") as err:
        build_policy(OpenVLAOFTConfig(model_path=str(ckpt)))
    assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="model_type is 'openvla', a openvla_oft checkpoint, not a cnn_gaussian one; "
                                              "set actor.model.model_type=openvla_oft"):
        build_policy(_cfg(tiny_model(image_size=56)))


def test_keys_that_describe_another_model_are_refused(ckpt):
    for key, value, message in (("is_lora", True, "actor.model.is_lora: is an OpenVLA-OFT key; model_type cnn_gaussian has no use"),
                                ("squash", "sigmoid", "actor.model.squash: got 'sigmoid'"),
                                ("cnn_channels", [8, 16], "actor.model.cnn_channels: needs 3")):
        with pytest.raises(ConfigError, match=message):
            _cfg(ckpt, **{key: value})
    for key, value, message in (("num_action_chunks", 4, "num_action_chunks=4 but the checkpoint outputs C x 7 actions with C = 2"),
                                ("action_dim", 6, "action_dim=6 but"), ("image_size", 96, "image_size=96 but"),
                                ("proprio_dim", 12, "proprio_dim=12 but the checkpoint reads a state of size 9"),
                                ("head_hidden_dim", 128, "head_hidden_dim=128 but the checkpoint has 64"),
                                ("squash", "tanh", "squash=tanh but")):
        with pytest.raises(UserError, match=message):
            build_policy(_cfg(ckpt, **{key: value}))


def test_make_model_cli_and_the_privileged_critic(tmp_path):
    from embodied_rl.cli.make_model import make_model_main

    assert make_model_main(["nature_cnn", str(tmp_path / "m"), "--model-type", "cnn_gaussian", "--image-size", "64",
                            "--proprio", "--proprio-dim", str(STATE), "--num-action-chunks", "1"]) == 0
    with pytest.raises(UserError, match="'small' is not a preset of --model-type cnn_gaussian; available: nature_cnn, tiny"):
        make_model_main(["small", str(tmp_path / "x"), "--model-type", "cnn_gaussian"])
    arch = json.loads((tmp_path / "m" / "config.json").read_text())
    assert arch["cnn_channels"] == [32, 64, 64] and arch["num_action_chunks"] == 1
    cfg = model_config("cnn_gaussian", model_path=str(tmp_path / "m"), use_proprio=True, proprio_dim=STATE, num_action_chunks=1, add_value_head=True,
                       value_type="chunk_level", value_input="privileged_state", privileged_state_dim=6)
    policy = build_policy(cfg)
    inputs = policy.prepare_inputs(observations(8, size=64, state_dim=STATE, privileged_dim=6))
    policy.observe_training_batch(inputs)
    assert int(policy.value_head.input_norm.count) == 8
    out = policy.predict(inputs, do_sample=True)
    torch.testing.assert_close(out.values, policy.state_values(inputs["privileged"]))


def test_config_checks_refuse_what_a_gaussian_cannot_do():
    from embodied_rl.configure import load_config

    for key in ("top_k=3", "attn_implementation=eager"):  # OpenVLA-OFT's own keys
        with pytest.raises(ConfigError, match=f"unknown key 'actor.model.{key.split('=')[0]}'"):
            load_config("maniskill_cnn_gaussian_ppo", [f"actor.model.{key}"], plan=False)
    with pytest.raises(ConfigError, match="rollout.backend=vllm does not serve actor.model.model_type='cnn_gaussian'"):
        load_config("maniskill_cnn_gaussian_ppo", ["rollout.backend=vllm"], plan=False)
    with pytest.raises(ConfigError, match="create_preset.name='small' is not a preset of model_type cnn_gaussian; available: nature_cnn, tiny"):
        load_config("maniskill_cnn_gaussian_sft", ["actor.model.create_preset.name=small"], plan=False)


# ---------------------------------------------------------------------------- PPO under Ray
def _ppo_run(out: Path, model: Path) -> str:
    from tests.tiny_runs import EVAL_64, tiny_run

    videos = "${runner.logger.log_path}/video"
    return tiny_run(out, model, {
        "runner": {"experiment_name": "cnn", "seed": 3, "val_check_interval": 2},
        "algorithm": {"logprob_type": "action_level"},
        "env": {"train": {"video_cfg": {"save_video": True, "video_base_dir": f"{videos}/train"}},
                "eval": {**EVAL_64, "total_num_envs": 2, "auto_reset": False, "ignore_terminations": True, "use_fixed_reset_state_ids": True,
                         "video_cfg": {"save_video": True, "video_base_dir": f"{videos}/eval"}}},
        "actor": {"model": {"model_type": "cnn_gaussian", "create_preset": {"name": "tiny", "image_size": 64}, "use_proprio": True, "proprio_dim": 12,
                            "num_action_chunks": 4}},  # PickCube's state with its goal (env_configs/maniskill_pick_cube.yaml)
    })


@pytest.mark.slow
@pytest.mark.maniskill
def test_ppo_two_steps_under_ray_then_eval_and_export(tmp_path):
    from tests.cli_runs import check_eval_only, read_metrics, run_cli, sidecars

    (tmp_path / "cnn.yaml").write_text(_ppo_run(tmp_path / "runs", tmp_path / "tiny-cnn"))
    run_cli("train", str(tmp_path / "cnn.yaml"), cwd=tmp_path)
    run = tmp_path / "runs" / "cnn"
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2]
    for row in metrics.values():
        assert math.isfinite(row["train/actor/total_loss"]) and math.isfinite(row["train/critic/value_loss"])
        assert row["env/num_trajectories"] > 0
    assert 0.0 <= metrics[2]["eval/success_once"] <= 1.0
    assert sorted(sidecars(run, "train")) == ["step_000001", "step_000002"] and any(sidecars(run, "eval").values())
    ckpt = run / "checkpoints" / "global_step_00000002"
    run_cli("eval", str(tmp_path / "cnn.yaml"), "runner.experiment_name=cnn_eval", f"runner.ckpt_path={ckpt}", cwd=tmp_path)
    check_eval_only(tmp_path / "runs" / "cnn_eval")
    run_cli("export", str(ckpt), str(tmp_path / "exported"), cwd=tmp_path)
    exported = build_policy(_cfg(tmp_path / "exported", proprio_dim=12, num_action_chunks=4, add_value_head=True, value_type="chunk_level"))
    start = build_policy(_cfg(tmp_path / "tiny-cnn", proprio_dim=12, num_action_chunks=4))
    assert not torch.equal(exported.log_std, start.log_std)  # the trained weights, not the start's
