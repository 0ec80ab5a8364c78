"""Processor (images, prompts, proprio) and the make-model command."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embodied_rl.cli.make_model import make_model_main
from embodied_rl.errors import ConfigError, UserError
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.processor import ImageTransform, prompt_for
from embodied_rl.types import EnvObservation
from tests.observations import observations

DINO = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
SIGLIP = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])


def test_images_are_normalised_per_tower_and_stacked():
    t = ImageTransform(28, [DINO[0], SIGLIP[0]], [DINO[1], SIGLIP[1]], center_crop=False)
    img = np.full((2, 40, 40, 3), 51, dtype=np.uint8)  # 0.2 everywhere
    resized = t(img)
    assert resized.shape == (2, 3, 28, 28) and resized.dtype == torch.uint8 and (resized == 51).all()
    two_cams = torch.cat([resized, resized], dim=1)
    assert torch.equal(t.normalize(two_cams)[:, 6:], t.normalize(two_cams)[:, :6])  # camera-major stacking
    out = t.normalize(resized)
    assert out.shape == (2, 6, 28, 28)
    expected = [(0.2 - m) / s for m, s in zip(DINO[0] + SIGLIP[0], DINO[1] + SIGLIP[1])]
    torch.testing.assert_close(out.mean(dim=(0, 2, 3)), torch.tensor(expected), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="uint8"):
        t(img.astype(np.float32))


def test_center_crop_keeps_the_central_90_percent_of_the_area():
    img = np.zeros((1, 100, 100, 3), dtype=np.uint8)
    img[:, :2], img[:, -2:], img[:, :, :2], img[:, :, -2:] = 255, 255, 255, 255  # a 2-px white frame
    means, stds = [[0.0] * 3], [[1.0] * 3]
    cropped = ImageTransform(56, means, stds, center_crop=True)(img)
    plain = ImageTransform(56, means, stds, center_crop=False)(img)
    assert cropped.max() == 0  # side round(100*sqrt(0.9)) = 95 drops the frame
    assert plain.max() > 128


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "m"
    assert make_model_main(["tiny", str(out), "--image-size", "56", "--num-images", "2", "--proprio-dim", "4"]) == 0
    return out


def _obs(wrist: bool = True, state_dim: int = 4) -> EnvObservation:
    """States in [-3, 3]: most lie outside the identity statistics' [-1, 1]."""
    return observations(2, size=64, seed=6, wrist=wrist, state_dim=state_dim, state_bound=3.0,
                        instructions=["Pick Up the Red Cube", "stack the cube"])


def test_prompt_layout_left_padding_bos_first(tiny):
    policy = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, max_prompt_length=40))
    inputs = policy.prepare_inputs(_obs())
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    tok = policy.tokenizer
    assert ids.shape == mask.shape == (2, 40)
    assert (ids[:, 0] == tok.bos_token_id).all() and (mask[:, 0] == 1).all()
    assert (ids[:, -1] == tok.convert_tokens_to_ids("▁")).all()
    for row, m in zip(ids, mask):
        n_pad = int((m == 0).sum())
        assert (m[1: 1 + n_pad] == 0).all() and (m[1 + n_pad:] == 1).all()  # pads right after BOS
        assert (row[1: 1 + n_pad] == tok.pad_token_id).all()
    text = tok.decode(ids[0][mask[0] == 1].tolist(), skip_special_tokens=True)
    assert text.strip() == prompt_for("Pick Up the Red Cube").strip() == "In: What action should the robot take to pick up the red cube?\nOut:"
    assert inputs["images"].shape == (2, 6, 56, 56) and inputs["images"].dtype == torch.uint8  # 2 cameras
    assert policy.pixel_values(inputs).shape == (2, 12, 56, 56)  # 2 cameras x (DINOv2 + SigLIP)
    with pytest.raises(ConfigError, match="max_prompt_length=8 is too short"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, max_prompt_length=8)).prepare_inputs(_obs())


def test_wrist_camera_and_proprio_inputs(tiny):
    policy = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, use_proprio=True, proprio_dim=4))
    with pytest.raises(ConfigError, match="num_images_in_input=2 but the env provides no wrist camera"):
        policy.prepare_inputs(_obs(wrist=False))
    inputs = policy.prepare_inputs(_obs())
    # identity statistics (q01=-1, q99=1): normalisation is clip to [-1, 1]
    states = _obs().states
    assert (np.abs(states) > 1).any() and (np.abs(states) < 1).any()
    torch.testing.assert_close(inputs["proprio"], torch.from_numpy(states).clamp(-1, 1), atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="proprio_dim=4 but the env state has 3 dims"):
        policy.prepare_inputs(_obs(state_dim=3))
    # The proprio token reaches the actions.
    with torch.no_grad():
        a = policy.predict(inputs, do_sample=False).logprobs
        inputs["proprio"] = -inputs["proprio"]
        b = policy.predict(inputs, do_sample=False).logprobs
    assert (a - b).abs().max() > 1e-6


def test_make_model_writes_official_layout(tiny, tmp_path):
    names = {p.name for p in tiny.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "dataset_statistics.json",
            "preprocessor_config.json"} <= names
    config = json.loads((tiny / "config.json").read_text())
    assert config["model_type"] == "openvla" and config["image_sizes"] == [56, 56] and config["num_images_in_input"] == 2
    assert config["text_config"]["vocab_size"] == 576 and config["pad_to_multiple_of"] == 64
    stats = json.loads((tiny / "dataset_statistics.json").read_text())
    assert stats["identity"]["action"]["q01"] == [-1.0] * 7 and len(stats["identity"]["proprio"]["q99"]) == 4
    assert config["torch_dtype"] == "float32"
    assert make_model_main(["tiny", str(tmp_path / "bf16"), "--image-size", "28", "--precision", "bf16"]) == 0
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    from safetensors.torch import load_file

    assert all(t.dtype == torch.bfloat16 for t in load_file(str(tmp_path / "bf16" / "model.safetensors")).values())
    with pytest.raises(UserError, match="exists and is not empty"):
        make_model_main(["tiny", str(tiny)])
    with pytest.raises(UserError, match="'huge' is not a preset of --model-type openvla_oft"):
        make_model_main(["huge", str(tmp_path / "x")])


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="actor.model.value_type: got 'token'"):
        OpenVLAOFTConfig(value_type="token")
    with pytest.raises(ConfigError, match="actor.model.lora_path: is set but is_lora is false"):
        OpenVLAOFTConfig(lora_path="x")
    with pytest.raises(ConfigError, match="actor.model.precision"):
        OpenVLAOFTConfig(precision="int8")


def test_center_crop_and_precision_keys_take_effect(tiny):
    obs = _obs()
    crop = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, center_crop=True)).prepare_inputs(obs)
    nocrop = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, center_crop=False)).prepare_inputs(obs)
    assert (crop["images"].float() - nocrop["images"].float()).abs().max() > 20
    bf16 = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2, precision="bf16", add_value_head=True))
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    with torch.no_grad():
        out = bf16.predict(bf16.prepare_inputs(obs), do_sample=True, temperature=1.0)
    assert out.logprobs.dtype == out.values.dtype == out.actions.dtype == torch.float32
