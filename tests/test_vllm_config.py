"""rollout.backend at config load: one-line errors for a model type or feature the vLLM backend
cannot run and for a missing vLLM; an installed vLLM with a config it serves passes. Then
rollout.gpu_memory_utilization: its range, its backend, and the share the plan derives from the
placement when it is null. Runs without vLLM (find_spec is what the rule consults)."""
from __future__ import annotations

import importlib.util
import typing
from types import SimpleNamespace

import pytest

from embodied_rl.config.plan import GPU_MEMORY_SHARED
from embodied_rl.config.schema.runtime import RolloutConfig
from embodied_rl.configure import load_config
from embodied_rl.distributed.resources import Resources
from embodied_rl.errors import ConfigError
from embodied_rl.models import checks
from embodied_rl.models.rollout_backends import ROLLOUT_BACKENDS


def _cfg(backend: str, model_type: str = "openvla_oft", gpu_memory_utilization: float | None = None, **model):
    m = {"model_type": model_type, "is_lora": False, "attention_mode": "bidirectional", "precision": "fp32", **model}
    rollout = SimpleNamespace(backend=backend, enable_offload=False, gpu_memory_utilization=gpu_memory_utilization)
    return SimpleNamespace(rollout=rollout, actor=SimpleNamespace(model=SimpleNamespace(**m)))


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


@pytest.mark.parametrize("model", [{}, {"is_lora": True}, {"precision": "bf16"}, {"precision": "fp16"}])
def test_installed_vllm_with_a_served_config_passes(monkeypatch, model):
    """The engine runs in actor.model.precision, the dtype the huggingface rollout loads in."""
    _vllm_installed(monkeypatch, True)
    checks._rollout_backend(_cfg("vllm", **model))


# ---------------------------------------------------------------- rollout.gpu_memory_utilization

GPU_NODE = Resources(1, 4, "gpu")


@pytest.mark.parametrize("share", [0, -0.5, 1.5, float("nan"), True])
def test_gpu_memory_utilization_outside_0_1_is_refused_in_one_line(share):
    with pytest.raises(ConfigError, match=r"^rollout.gpu_memory_utilization=\S+: must be in \(0, 1\] .*or null to derive") as err:
        checks._gpu_memory_utilization(_cfg("vllm", gpu_memory_utilization=share))
    assert "\n" not in str(err.value)


def test_gpu_memory_utilization_sizes_the_vllm_engine_only():
    with pytest.raises(ConfigError, match=r"^rollout.gpu_memory_utilization=0.5 sizes a vLLM engine, but rollout.backend=huggingface; "
                                          r"remove it \(set null\) or set rollout.backend=vllm$"):
        checks._gpu_memory_utilization(_cfg("huggingface", gpu_memory_utilization=0.5))
    for share in (None, 1.0, 0.05):
        checks._gpu_memory_utilization(_cfg("vllm", gpu_memory_utilization=share))
    checks._gpu_memory_utilization(_cfg("huggingface"))


def _load(monkeypatch, *overrides: str, resources: Resources = GPU_NODE):
    _vllm_installed(monkeypatch, True)
    return load_config("maniskill_ppo_tiny", ["rollout.backend=vllm", *overrides], resources=resources)


@pytest.mark.parametrize(("overrides", "share"), [
    ((), GPU_MEMORY_SHARED / 2),  # collocated: each GPU holds one engine and one actor rank
    (("cluster.component_placement={actor: 0-1, env: all, rollout: 2-3}",), GPU_MEMORY_SHARED),  # disaggregated
    (("cluster.component_placement={actor: 1-2, env: all, rollout: 2-3}",), GPU_MEMORY_SHARED / 2),  # the most crowded GPU counts
    (("runner.only_eval=true",), GPU_MEMORY_SHARED),  # no actor group is started
    (("rollout.gpu_memory_utilization=0.3",), 0.3),  # a set value is kept
])
def test_null_share_is_derived_from_the_processes_on_each_gpu(monkeypatch, overrides, share):
    from embodied_rl.runtime.groups import rollout_worker_kwargs

    cfg = _load(monkeypatch, *overrides)
    assert cfg.rollout.gpu_memory_utilization == pytest.approx(share)
    assert rollout_worker_kwargs(cfg, 4)["gpu_memory_utilization"] == cfg.rollout.gpu_memory_utilization  # what the engine gets


def test_share_counts_processes_per_slot_and_stays_null_for_huggingface(monkeypatch):
    # On CPU slots several rollout processes may share one: 2 engines and 1 actor rank on each.
    cfg = _load(monkeypatch, "cluster.component_placement={actor: all, env: 0-1:0-3, rollout: 0-1:0-3}", resources=Resources(1, 2, "cpu"))
    assert cfg.rollout.gpu_memory_utilization == 0.3
    assert load_config("maniskill_ppo_tiny", resources=GPU_NODE).rollout.gpu_memory_utilization is None


def test_a_resolved_vllm_config_loads_again(monkeypatch):
    """A run's config.yaml holds the derived share; it is a valid value for the same backend."""
    from embodied_rl.config.loader import to_dict
    from embodied_rl.configure import config_from_dict

    cfg = _load(monkeypatch)
    assert config_from_dict(to_dict(cfg), resources=GPU_NODE).rollout.gpu_memory_utilization == cfg.rollout.gpu_memory_utilization
