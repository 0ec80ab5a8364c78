"""rollout.backend=vllm at config load: one-line errors for an unserved model type, a missing
vLLM, and (until the rollout worker runs the engine) the backend itself."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from embodied_rl.errors import ConfigError
from embodied_rl.models import checks


def _cfg(backend: str, model_type: str = "openvla_oft"):
    return SimpleNamespace(rollout=SimpleNamespace(backend=backend), actor=SimpleNamespace(model=SimpleNamespace(model_type=model_type)))


def test_huggingface_backend_passes():
    checks._rollout_backend(_cfg("huggingface"))


def test_unserved_model_type_is_refused_first():
    with pytest.raises(ConfigError, match=r"does not serve actor.model.model_type='octo'") as err:
        checks._rollout_backend(_cfg("vllm", "octo"))
    assert "\n" not in str(err.value)


def test_missing_vllm_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install '\.\[vllm\]'") as err:
        checks._rollout_backend(_cfg("vllm"))
    assert "\n" not in str(err.value)


def test_installed_vllm_is_still_refused_until_the_workers_run_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    with pytest.raises(ConfigError, match="not run by the rollout workers yet"):
        checks._rollout_backend(_cfg("vllm"))
