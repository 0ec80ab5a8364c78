"""Checkpoints in the official HF layout; save -> load is bit-exact; clear errors."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from embodied_rl.errors import CheckpointError, UserError
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.checkpoint import read_state_dict, write_state_dict
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.tiny_tokenizer import build_tiny_tokenizer
from embodied_rl.types import EnvObservation
from tests.observations import observations

IMG, V = 56, 512
TOWERS = [("vit_large_patch14_reg4_dinov2.lvd142m", {"embed_dim": 32, "depth": 3, "num_heads": 2}),
          ("vit_so400m_patch14_siglip_224", {"embed_dim": 48, "depth": 3, "num_heads": 2})]
TEXT = {"model_type": "llama", "vocab_size": V + 64, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "pad_token_id": V, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6}


def _obs() -> EnvObservation:
    return observations(2, seed=4, instructions=["pick up the cube", "close the microwave"])


def write_official_checkpoint(d: Path) -> tuple[dict[str, torch.Tensor], list[torch.nn.Module]]:
    """Build the checkpoint the way the official conversion does, independently of our model code."""
    torch.manual_seed(7)
    sd: dict[str, torch.Tensor] = {}
    towers = []
    for prefix, (tid, over) in zip(("featurizer", "fused_featurizer"), TOWERS):
        tower = timm.create_model(tid, pretrained=False, num_classes=0, img_size=IMG, **over).eval()
        with torch.no_grad():  # non-trivial LayerScale values so a wrong mapping would show
            for n, p in tower.named_parameters():
                if n.endswith(".gamma"):
                    p.uniform_(0.5, 1.5)
        towers.append(tower)
        for k, v in tower.state_dict().items():  # LayerScale.gamma is stored as `scale_factor`
            sd[f"vision_backbone.{prefix}.{k.replace('.gamma', '.scale_factor')}"] = v
    for name, (i, o) in {"fc1": (80, 320), "fc2": (320, 64), "fc3": (64, 64)}.items():
        sd[f"projector.{name}.weight"], sd[f"projector.{name}.bias"] = torch.randn(o, i) * 0.05, torch.randn(o) * 0.05
    llm = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in TEXT.items() if k != "model_type"}))
    sd.update({f"language_model.{k}": v for k, v in llm.state_dict().items()})
    keys = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2], "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    d.mkdir(parents=True)
    for name, ks in shards.items():
        save_file({k: sd[k].contiguous() for k in ks}, str(d / name))
    index = {"metadata": {"total_size": 0}, "weight_map": {k: n for n, ks in shards.items() for k in ks}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    config = {
        "model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
        "auto_map": {"AutoConfig": "configuration_prismatic.OpenVLAConfig", "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction"},
        "vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "llama2-7b-pure", "arch_specifier": "no-align+fused-gelu-mlp",
        "use_fused_vision_backbone": True, "image_resize_strategy": "resize-naive", "text_config": TEXT, "llm_max_length": 2048,
        "pad_token_id": V, "pad_to_multiple_of": 64, "output_projector_states": False,
        "timm_model_ids": [t for t, _ in TOWERS], "timm_override_act_layers": [None, None], "image_sizes": [IMG, IMG],
        "n_action_bins": 256, "norm_stats": {}, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
        "timm_override_args": [o for _, o in TOWERS],  # ours: shrinks the towers (absent in real checkpoints)
    }
    (d / "config.json").write_text(json.dumps(config))
    build_tiny_tokenizer(V).save_pretrained(str(d))
    stats = {k: {"action": {"q01": [-0.1] * 7, "q99": [0.1] * 7, "mask": [True] * 6 + [False]},
                 "proprio": {"q01": [0.0] * 8, "q99": [1.0] * 8}} for k in ("bridge_orig", "libero_10_no_noops")}
    (d / "dataset_statistics.json").write_text(json.dumps(stats))
    proprio = {"module.fc1.weight": torch.randn(64, 8), "module.fc1.bias": torch.randn(64),
               "module.fc2.weight": torch.randn(64, 64), "module.fc2.bias": torch.randn(64)}
    torch.save(proprio, d / "proprio_projector--5000_checkpoint.pt")
    sd.update({f"proprio::{k}": v for k, v in proprio.items()})
    return sd, towers + [llm.eval()]


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    d = tmp_path_factory.mktemp("official") / "openvla-oft-tiny"
    sd, towers = write_official_checkpoint(d)
    return d, sd, towers


def test_official_layout_loads_with_every_tensor_in_place(official):
    d, sd, towers = official
    cfg = OpenVLAOFTConfig(model_path=str(d), unnorm_key="libero_10", use_proprio=True, proprio_dim=8)
    policy = build_policy(cfg)  # load_exact raises on any missing / unexpected / mis-shaped key
    assert policy.unnorm_key == "libero_10_no_noops"
    mine = policy.vla.state_dict()
    assert set(mine) == {k for k in sd if not k.startswith("proprio::")}
    assert all(torch.equal(mine[k], sd[k]) for k in mine)
    assert torch.equal(policy.proprio_projector.fc1.weight, sd["proprio::module.fc1.weight"])
    # The towers compute what the independently built timm models compute (second-to-last block, no prefix tokens).
    x = torch.randn(1, 3, IMG, IMG)
    with torch.no_grad():
        for ours, ref in zip(policy.vla.vision_backbone.towers, towers[:2]):
            expected = ref.get_intermediate_layers(x, n={1})[0]
            torch.testing.assert_close(policy.vla.vision_backbone._features(ours, x), expected)
        out = policy.predict(policy.prepare_inputs(_obs()), do_sample=False)
    # Gripper dim is masked out of the statistics: it stays a bin centre in [-1, 1].
    assert out.actions[..., :6].abs().max() <= 0.1 + 1e-6 and out.actions[..., 6].abs().max() <= 1.0


def test_matches_a_hand_built_official_forward(official):
    """Oracle: the reference layout without padding, [BOS, patches, prompt[1:], '▁', 56 zero slots, </s>],
    full attention, positions 0..S-1, logits read at the 56 positions before each slot."""
    d, sd, (dino, siglip, llm) = official
    policy = build_policy(OpenVLAOFTConfig(model_path=str(d), unnorm_key="bridge_orig", max_prompt_length=48))
    obs = _obs()
    inputs = policy.prepare_inputs(obs)
    with torch.no_grad():
        ours, _ = policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), 56, None, True)
        pv = policy.pixel_values(inputs)
        for i, text in enumerate(obs.task_descriptions):
            img = pv[i: i + 1]
            feats = torch.cat([dino.get_intermediate_layers(img[:, :3], n={1})[0], siglip.get_intermediate_layers(img[:, 3:], n={1})[0]], -1)
            gelu = torch.nn.functional.gelu
            h = gelu(torch.nn.functional.linear(feats, sd["projector.fc1.weight"], sd["projector.fc1.bias"]))
            h = gelu(torch.nn.functional.linear(h, sd["projector.fc2.weight"], sd["projector.fc2.bias"]))
            patches = torch.nn.functional.linear(h, sd["projector.fc3.weight"], sd["projector.fc3.bias"])
            ids = torch.tensor(policy.prompt_tokenizer.encode(text))
            emb = llm.get_input_embeddings()
            seq = torch.cat([emb(ids[:1])[None], patches, emb(ids[1:])[None], torch.zeros(1, 56, 64), emb(torch.tensor([[2]]))], 1)
            s_len = seq.shape[1]
            full = torch.zeros(1, 1, s_len, s_len)  # additive mask with nothing masked = bidirectional
            logits = llm(inputs_embeds=seq, attention_mask=full, position_ids=torch.arange(s_len)[None]).logits
            start = patches.shape[1] + len(ids) - 1  # the '▁' position predicts slot 0
            ref = logits[0, start: start + 56, V - 256: V]
            torch.testing.assert_close(ours[i], ref, atol=1e-5, rtol=1e-5)


def test_missing_tensor_is_named(official, tmp_path):
    d, _, _ = official
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in d.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    shard = broken / "model-00002-of-00002.safetensors"
    tensors = load_file(str(shard))
    victim = min(tensors)
    del tensors[victim]
    save_file(tensors, str(shard))
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    del index["weight_map"][victim]
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"1 missing \\({victim}\\)"):
        build_policy(OpenVLAOFTConfig(model_path=str(broken), unnorm_key="bridge_orig"))


def test_minimal_official_text_config_means_llama2_7b():
    """HF stores nested configs as a diff against LlamaConfig's defaults, which are Llama-2-7B's."""
    from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig

    arch = OpenVLAArchConfig.from_json_dict({
        "model_type": "openvla", "text_config": {"model_type": "llama", "pad_token_id": 32000, "torch_dtype": "bfloat16", "vocab_size": 32064},
        "timm_model_ids": [t for t, _ in TOWERS], "timm_override_act_layers": [None, None], "image_sizes": [224, 224],
        "use_fused_vision_backbone": True, "pad_token_id": 32000, "pad_to_multiple_of": 64, "n_action_bins": 256})
    llama = arch.llama_config()
    assert (llama.hidden_size, llama.num_hidden_layers, llama.intermediate_size) == (4096, 32, 11008)
    assert arch.llm_hidden_size == 4096 and arch.base_vocab_size == 32000
    assert arch.to_json_dict()["text_config"] == {"model_type": "llama", "pad_token_id": 32000, "torch_dtype": "bfloat16", "vocab_size": 32064}


@pytest.mark.parametrize("text_config", [{"vocab_size": 32064},  # an official file: the rest at the defaults
                                         {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2},
                                         {"num_attention_heads": 8}])  # no kv heads: as many as attention heads
def test_llm_shape_is_what_llama_config_fills_in(text_config):
    """The config checks read the LLM's shape without transformers; it must be LlamaConfig's."""
    from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig

    arch = OpenVLAArchConfig(text_config={"model_type": "llama", **text_config})
    llama = arch.llama_config()
    assert arch.llm_shape() == {k: getattr(llama, k) for k in arch.llm_shape()}
    assert set(arch.llm_shape()) == {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                     "num_attention_heads", "num_key_value_heads"}


def test_checkpoint_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="config.json not found.*make-model"):
        build_policy(OpenVLAOFTConfig(model_path=str(tmp_path)))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError, match="model_type is 'llama', expected 'openvla'"):
        build_policy(OpenVLAOFTConfig(model_path=str(tmp_path)))


@pytest.fixture(scope="module")
def tiny(tiny_model) -> Path:
    return tiny_model(image_size=IMG)


def test_save_load_round_trip_is_bit_exact(tiny, tmp_path):
    cfg = OpenVLAOFTConfig(model_path=str(tiny), add_value_head=True, use_proprio=True, num_action_chunks=2)
    policy = build_policy(cfg)
    with torch.no_grad():  # move every weight away from its init so the test sees the saved values
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    policy.save_checkpoint(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "value_head.safetensors").is_file() and (tmp_path / "ckpt" / "proprio_projector.safetensors").is_file()
    again = build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "ckpt"), add_value_head=True, use_proprio=True, num_action_chunks=2))
    a, b = policy.state_dict(), again.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        oa, ob = policy.predict(inputs, do_sample=False), again.predict(again.prepare_inputs(_obs()), do_sample=False)
    assert torch.equal(oa.logprobs, ob.logprobs) and torch.equal(oa.values, ob.values) and torch.equal(oa.actions, ob.actions)
    # A value head saved for action_level does not silently load as chunk_level.
    with pytest.raises(CheckpointError, match="value_head.safetensors.*shape-mismatched"):
        build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "ckpt"), add_value_head=True, value_type="chunk_level", num_action_chunks=3))


def test_critic_inside_the_main_weights_loads(tiny, tmp_path):
    """RLinf-style checkpoints keep `value_head.mlp.*` in model.safetensors."""
    src = build_policy(OpenVLAOFTConfig(model_path=str(tiny), add_value_head=True, value_type="chunk_level"))
    src.save_checkpoint(tmp_path / "ck")
    main = load_file(str(tmp_path / "ck" / "model.safetensors"))
    main.update({f"value_head.{k}": v for k, v in load_file(str(tmp_path / "ck" / "value_head.safetensors")).items()})
    save_file(main, str(tmp_path / "ck" / "model.safetensors"))
    (tmp_path / "ck" / "value_head.safetensors").unlink()
    again = build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "ck"), add_value_head=True, value_type="chunk_level"))
    assert all(torch.equal(a, b) for a, b in zip(src.value_head.parameters(), again.value_head.parameters()))
    build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "ck")))  # without a critic the extra tensors are skipped


def test_sharded_write_round_trip(tmp_path):
    sd = {f"w{i}": torch.randn(64, 64) for i in range(5)}
    write_state_dict(sd, tmp_path, max_shard_bytes=40_000)
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("model-*.safetensors"))) == 3  # 2 x 16 KiB per shard
    back = read_state_dict(tmp_path)
    assert all(torch.equal(back[k], sd[k]) for k in sd)


def test_config_must_match_checkpoint(tiny):
    with pytest.raises(UserError, match="image_size=224 but the checkpoint is built for 56"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), image_size=224))
    with pytest.raises(UserError, match="num_images_in_input=2 but this checkpoint was made for 1"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_images_in_input=2))
    with pytest.raises(UserError, match="action_dim=6 but"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), action_dim=6))
    with pytest.raises(UserError, match="unnorm_key='bridge_orig' not in dataset_statistics.json; available keys: identity"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), unnorm_key="bridge_orig"))
    with pytest.raises(UserError, match="model_type='openvla' is unknown; available: cnn_gaussian, openvla_oft"):
        build_policy(OpenVLAOFTConfig(model_path=str(tiny), model_type="openvla"))


def test_a_created_preset_that_reads_its_state_carries_its_proprio_projector(tmp_path, caplog):
    """`make-model --proprio` and `actor.model.create_preset` with use_proprio write the projector,
    so loading the new model does not warn about missing weights."""
    from types import SimpleNamespace

    from embodied_rl.cli.make_model import make_model_main
    from embodied_rl.config.schema.model import CreatePresetConfig
    from embodied_rl.runtime.train import ensure_model

    assert make_model_main(["tiny", str(tmp_path / "cli"), "--image-size", "56", "--proprio", "--proprio-dim", "12"]) == 0
    model = OpenVLAOFTConfig(model_path=str(tmp_path / "run"), create_preset=CreatePresetConfig(name="tiny", image_size=56),
                             action_dim=7, proprio_dim=12, use_proprio=True)
    ensure_model(SimpleNamespace(actor=SimpleNamespace(model=model), rollout=SimpleNamespace(model=model), runner=SimpleNamespace(seed=0)))
    for made in ("cli", "run"):
        assert (tmp_path / made / "proprio_projector.safetensors").is_file()
        with caplog.at_level(logging.WARNING):
            build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / made), use_proprio=True, proprio_dim=12))
        assert "proprio_projector" not in caplog.text
