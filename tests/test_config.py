"""Config system: schema validation, env-config picks, overrides, interpolation, saved config, docs.

Runs against a throwaway project (configs/ + env_configs/ in tmp) and a tiny simulator
backend registered here, so it does not depend on the simulators' start-up time; the real
ManiSkill backend's params are checked in test_repo_configs_load.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from embodied_rl.config.loader import (
    compose,
    read_yaml,
    resolve,
    save_resolved_config,
    to_dict,
)
from embodied_rl.config.schema import RootConfig
from embodied_rl.config.schema.model import ModelConfig, register_model_config
from embodied_rl.config.typecheck import build
from embodied_rl.config_docs import render_config_docs
from embodied_rl.configure import load_config
from embodied_rl.envs.backend import SimulatorBackend, register_simulator
from embodied_rl.errors import ConfigError
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class _Params:
    width: int = 64
    task: str = "reach"
    extras: dict = dataclasses.field(default_factory=dict)


class _CfgTestBackend(SimulatorBackend):  # only its params_cls is used by the loader
    params_cls = _Params

    def reset(self, env_ids, reset_ids): raise NotImplementedError
    def step(self, actions): raise NotImplementedError
    def num_reset_ids(self): return None
    def task_of(self, env_index): return ("reach", "")


@pytest.fixture(scope="module", autouse=True)
def cfgtest_simulator():
    """Registered for this module only: later tests (e.g. the schema walk, which walks every
    registered simulator) see the built-in backends alone."""
    from embodied_rl.envs import backend

    register_simulator("cfgtest")(_CfgTestBackend)
    yield
    backend._SIMULATORS.pop("cfgtest", None)


EXPERIMENT = """
defaults:
  - env/reach_a@env.train
  - env/reach_a@env.eval
runner:
  experiment_name: exp1
  max_steps: 4
env:
  eval:
    max_episode_steps: 7
actor:
  model:
    create_preset: {name: tiny}
    add_value_head: true      # the default adv_type (gae) trains a critic
    value_type: chunk_level   # one value per chunk reward (algorithm.reward_type)
"""


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An experiment with its own configs, run from its own directory: relative paths (the
    default model_path, models/tiny-openvla-oft) name nothing of the checkout's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "env_configs").mkdir()
    (tmp_path / "configs" / "exp.yaml").write_text(EXPERIMENT)
    (tmp_path / "env_configs" / "reach_a.yaml").write_text(
        "env_type: cfgtest\nmax_episode_steps: 20\ntask_description: reach A\ninit_params:\n  width: 32\n"
    )
    (tmp_path / "env_configs" / "reach_b.yaml").write_text("env_type: cfgtest\ntask_description: reach B\n")
    return tmp_path / "configs" / "exp.yaml"


def load(project: Path, *overrides: str) -> RootConfig:
    return load_config(str(project), list(overrides))


def error_of(project: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(project, *overrides)
    msg = str(info.value)
    assert "\n" not in msg, msg
    return msg


def test_env_configs_defaults_and_file_precedence(project: Path) -> None:
    cfg = load(project)
    assert cfg.env.train.task_description == "reach A"
    assert cfg.env.train.max_episode_steps == 20  # from the env config
    assert cfg.env.eval.max_episode_steps == 7  # the experiment file wins over the env config
    assert cfg.env.train.init_params == {"width": 32, "task": "reach", "extras": {}}  # backend defaults filled
    assert cfg.runner.max_steps == 4 and cfg.actor.optim.lr == pytest.approx(1e-4)  # file + schema default


def test_overrides_types_and_env_pick(project: Path) -> None:
    cfg = load(project, "runner.max_steps=9", "actor.optim.lr=3e-5", "env.train=reach_b",
               "runner.logger.logger_backends=[console]", "+env.eval.init_params.extras.k=1",
               "cluster.component_placement={actor: 0-1, env: 0-1, rollout: 0-1}")
    assert cfg.runner.max_steps == 9
    assert cfg.actor.optim.lr == pytest.approx(3e-5)  # "3e-5" is a str in YAML; float fields accept it
    assert cfg.env.train.task_description == "reach B" and cfg.env.train.init_params["width"] == 64
    assert cfg.env.eval.task_description == "reach A"  # only env.train was re-picked
    assert cfg.runner.logger.logger_backends == ["console"]
    assert cfg.env.eval.init_params["extras"] == {"k": 1}
    assert cfg.cluster.component_placement["env"] == "0-1"


def test_interpolation_resolves_across_sections(project: Path) -> None:
    cfg = load(project, "runner.output_dir=/tmp/out", "runner.seed=77")
    assert cfg.runner.logger.log_path == "/tmp/out/exp1"
    assert cfg.env.train.video_cfg.video_base_dir == "/tmp/out/exp1/video/train"
    assert cfg.actor.seed == 77  # ${runner.seed}
    assert cfg.rollout.model.model_path == cfg.actor.model.model_path
    assert cfg.rollout.channel.name == cfg.env.channel.name


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["runner.max_step=3"], "unknown key 'runner.max_step'; did you mean 'runner.max_steps'?"),
        (["algorithm.max_steps=3"], "did you mean 'runner.max_steps'?"),
        (["runner.max_steps=abc"], "runner.max_steps: expected int, got 'abc'"),
        (["runner.only_eval=maybe"], "runner.only_eval: expected bool, got 'maybe'"),
        (["rollout.backend=hf"], "rollout.backend: expected one of 'huggingface', 'vllm', got 'hf'"),
        (["env.train=nope"], "env.train: unknown env config 'nope'; available: "),
        (["env.train.env_type=???"], "env.train: no env config chosen"),
        (["runner.experiment_name=???"], "runner.experiment_name: missing required value"),
        (["+runner.foo=1"], "unknown key 'runner.foo'"),
        (["+runner.max_steps=1"], "'runner.max_steps' is a key of its section; drop the '+'"),
        (["+actor.model.center_crop=false"], "'actor.model.center_crop' is a key of its section; drop the '+'"),
        (["env.train.init_params.extra=1"], "add it with '+env.train.init_params.extra=1'"),
        (["+env.train.init_params.widht=1"], "unknown key 'env.train.init_params.widht'; did you mean 'env.train.init_params.width'?"),
        (["env.train.init_params.width=wide"], "env.train.init_params.width: expected int, got 'wide'"),
        (["env.train.env_type=nosuchsim"], "env.train.env_type: unknown env_type 'nosuchsim'"),
        (["runner.logger.log_path=${runner.nope}"], "runner.logger.log_path: Interpolation key 'runner.nope' not found"),
        (["actor.global_batch_size=7", "actor.micro_batch_size=2"], "actor.global_batch_size=7 must be a multiple of actor.micro_batch_size x actor processes"),
        (["runner.max_steps"], "override 'runner.max_steps' must look like key=value"),
        (["algorithm.sampling_params.eval_scoring=[]"], "algorithm.sampling_params.eval_scoring is empty; list at least one of: greedy, sampled"),
        (["algorithm.sampling_params.eval_scoring=[sampled, sampled]"], "eval_scoring=[sampled, sampled] repeats a scoring"),
        (["algorithm.sampling_params.eval_scoring=[argmax]"], "algorithm.sampling_params.eval_scoring[0]: expected one of 'greedy', 'sampled', got 'argmax'"),
        (["algorithm.sampling_params.do_sample_eval=true"], "unknown key 'algorithm.sampling_params.do_sample_eval': every evaluation now scores greedy and sampled"),
        (["algorithm.sampling_params.top_k=3"], "unknown key 'algorithm.sampling_params.top_k': it moved to actor.model.top_k"),
        (["algorithm.sampling_params.logprobs_over=all_bins"], "unknown key 'algorithm.sampling_params.logprobs_over': it moved to actor.model.logprobs_over"),
        (["actor.model.top_k=0"], "actor.model.top_k: must be in [1, 256] (action bins) or null, got 0"),
        (["actor.model.logprobs_over=every_bin"], "actor.model.logprobs_over: expected one of 'top_k', 'all_bins', got 'every_bin'"),
    ],
)
def test_errors_are_one_line_and_name_the_key(project: Path, overrides: list[str], expected: str) -> None:
    assert expected in error_of(project, *overrides)


def test_a_config_file_is_read_as_it_is_now(project: Path) -> None:
    """Files are parsed once per content: an edit between two loads (even of the same size, within
    one timestamp tick) is seen, and what a load changes in the parsed tree stays its own."""
    assert load(project).runner.max_steps == 4
    project.write_text(project.read_text().replace("max_steps: 4", "max_steps: 5"))
    assert load(project).runner.max_steps == 5
    assert read_yaml(project)["runner"].pop("max_steps") == 5 and read_yaml(project)["runner"]["max_steps"] == 5
    project.write_bytes(b"runner: {max_steps: \xff}\n")
    assert error_of(project).startswith(f"{project}: invalid YAML: 'utf-8' codec can't decode")


def test_unknown_key_in_yaml_file(project: Path) -> None:
    project.write_text(EXPERIMENT.replace("actor:\n  model:", "actor:\n  optim:\n    learning_rate: 0.1\n  model:"))
    assert "unknown key 'actor.optim.learning_rate'" in error_of(project)


def test_missing_env_config_in_defaults(project: Path) -> None:
    project.write_text(EXPERIMENT.replace("env/reach_a@env.eval", "env/reach_c@env.eval"))
    assert error_of(project).startswith("env.eval: unknown env config 'reach_c'")


def test_resolved_config_saved_and_reloadable(project: Path, tmp_path: Path) -> None:
    cfg = load(project, "runner.max_steps=5")
    path = save_resolved_config(cfg, tmp_path / "run")
    assert path == tmp_path / "run" / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    assert saved["runner"]["max_steps"] == 5 and "${" not in path.read_text()
    assert to_dict(load_config(str(path))) == to_dict(cfg)  # a saved config loads back identically


def test_repo_configs_load() -> None:
    """The shipped experiments load with the real simulator backends and env configs."""
    for path in sorted((REPO / "configs").glob("*.yaml")):
        # SFT configs name demos a user records first (tests/test_shipped_configs.py records them).
        cfg = load_config(path.stem, skip=("sft_data",))
        assert cfg.runner.experiment_name == path.stem
        assert cfg.env.train.env_type and cfg.env.eval.env_type


def test_config_doc_is_up_to_date() -> None:
    doc = REPO / "docs" / "CONFIG.md"
    assert doc.is_file() and doc.read_text() == render_config_docs(), (
        "docs/CONFIG.md is out of date; regenerate it with: python scripts/gen_config_docs.py"
    )


@dataclasses.dataclass
class _MlpConfig(ModelConfig):  # a second policy type: its own key, none of OpenVLA-OFT's
    hidden_size: int = 32


@pytest.fixture()
def mlp_model_type():
    from embodied_rl.config.schema import model

    register_model_config("cfgtest_mlp")(_MlpConfig)
    yield
    model._MODEL_CONFIGS.pop("cfgtest_mlp", None)


def _built(project: Path, *overrides: str) -> RootConfig:
    """The schema step of loading alone (the model rules would also want a registered policy)."""
    return build(RootConfig, resolve(compose(str(project), list(overrides))), "")


def test_actor_model_is_built_as_the_class_its_model_type_names(project: Path, mlp_model_type) -> None:
    oft = load(project, "actor.model.center_crop=false")
    assert type(oft.actor.model) is OpenVLAOFTConfig and oft.actor.model.center_crop is False
    mlp = _built(project, "actor.model.model_type=cfgtest_mlp", "actor.model.hidden_size=16")
    assert type(mlp.actor.model) is _MlpConfig and mlp.actor.model.hidden_size == 16
    assert not hasattr(mlp.actor.model, "center_crop")  # OFT's defaults are not carried into another type
    with pytest.raises(ConfigError, match=r"unknown key 'actor.model.center_crop'.*hidden_size"):
        _built(project, "actor.model.model_type=cfgtest_mlp", "actor.model.center_crop=false")
    with pytest.raises(ConfigError, match=r"unknown key 'actor.model.hidden_size'"):
        load(project, "actor.model.hidden_size=16")
    assert "available: cfgtest_mlp, cnn_gaussian, openvla_oft" in error_of(project, "actor.model.model_type=mlp")
    with pytest.raises(TypeError, match="model_config"):
        ModelConfig()
