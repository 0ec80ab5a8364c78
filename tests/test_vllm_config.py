"""rollout.backend at config load: one-line errors for a model type or feature the vLLM backend
cannot run and for a missing vLLM; an installed vLLM with a config it serves passes. Runs
without vLLM (find_spec is what the rule consults)."""
from __future__ import annotations

import importlib.util
import typing
from types import SimpleNamespace

import pytest

from embodied_rl.config.schema.runtime import RolloutConfig
from embodied_rl.errors import ConfigError
from embodied_rl.models import checks
from embodied_rl.models.rollout_backends import ROLLOUT_BACKENDS


def _cfg(backend: str, model_type: str = "openvla_oft", **model):
    m = {"model_type": model_type, "is_lora": False, "attention_mode": "bidirectional", "precision": "fp32", **model}
    return SimpleNamespace(rollout=SimpleNamespace(backend=backend, enable_offload=False), actor=SimpleNamespace(model=SimpleNamespace(**m)))


def _vllm_installed(monkeypatch, installed: bool) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if installed else None) if name == "vllm" else real(name, *a))


def test_the_schema_offers_exactly_the_registered_backends():
    choices = typing.get_args(typing.get_type_hints(RolloutConfig)["backend"])
    assert sorted(choices) == sorted(ROLLOUT_BACKENDS)


def test_huggingface_backend_passes_without_vllm(monkeypatch):
    _vllm_installed(monkeypatch, False)
    checks._rollout_backend(_cfg("huggingface", is_lora=True, precision="bf16"))


def test_unserved_model_type_is_refused_first(monkeypatch):
    _vllm_installed(monkeypatch, False)
    with pytest.raises(ConfigError, match=r"rollout.backend=vllm does not serve actor.model.model_type='octo'") as err:
        checks._rollout_backend(_cfg("vllm", "octo"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("model", "offload", "key"), [
    ({"attention_mode": "causal"}, False, "actor.model.attention_mode=causal"),
    ({"precision": "bf16"}, False, "actor.model.precision=bf16/fp16"),
    ({}, True, "rollout.enable_offload=true"),
])
def test_features_the_engine_cannot_honour_are_refused_before_the_install(monkeypatch, model, offload, key):
    _vllm_installed(monkeypatch, False)
    cfg = _cfg("vllm", **model)
    cfg.rollout.enable_offload = offload
    with pytest.raises(ConfigError, match=rf"^{key} with rollout.backend=vllm: .*use rollout.backend=huggingface$") as err:
        checks._rollout_backend(cfg)
    assert "\n" not in str(err.value)


def test_missing_vllm_names_the_set_up_flag_and_the_extra(monkeypatch):
    _vllm_installed(monkeypatch, False)
    with pytest.raises(ConfigError, match=r"needs vllm, which is not installed: run `bash scripts/setup.sh --vllm` \(or pip install '\.\[vllm\]'") as err:
        checks._rollout_backend(_cfg("vllm"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("model", [{}, {"is_lora": True}])
def test_installed_vllm_with_a_served_config_passes(monkeypatch, model):
    _vllm_installed(monkeypatch, True)
    checks._rollout_backend(_cfg("vllm", **model))
