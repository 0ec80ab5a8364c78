"""Plug-ins (embodied_rl/plugins.py): a package outside this repository adds a simulator and a
policy type, named in the config, and trains with them under Ray; bad plug-ins are one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError
from embodied_rl.plugins import load_plugins
from tests.cli_runs import read_metrics
from tests.plugin_fixtures import EXAMPLE_PLUGIN_DIR as EXAMPLE

PLUGIN_PPO = """\
plugins: [erl_example_plugin]
defaults:
  - env/{env}@env.train
  - env/{env}@env.eval
cluster:
  component_placement: {{actor: 0, env: 0, rollout: 0}}
runner:
  output_dir: {out}
  experiment_name: plugin_ppo
  max_steps: 2
  seed: 3
  logger: {{logger_backends: [console, example_jsonl]}}
algorithm: {{adv_type: gae, reward_type: chunk_level, reward_norm: running}}
env:
  train: {{total_num_envs: 2, auto_reset: true, video_cfg: {{save_video: false}}}}
  eval: {{total_num_envs: 2, video_cfg: {{save_video: true}}}}
actor:
  micro_batch_size: 4
  global_batch_size: 4
  model:
    model_type: oft_gain
    translation_gain: 0.5
    model_path: {model}
    create_preset: {{name: tiny, image_size: 64}}
    add_value_head: true
    value_type: chunk_level
"""


pytestmark = pytest.mark.usefixtures("registries_restored")


def _cli(*args: str, cwd: Path, pythonpath: Path | None = EXAMPLE) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def _project(tmp_path: Path, **fmt: str) -> Path:
    (tmp_path / "env_configs").mkdir()
    (tmp_path / "env_configs" / "point_reach.yaml").write_text((EXAMPLE / "point_reach.yaml").read_text())
    (tmp_path / "configs").mkdir()
    exp = tmp_path / "configs" / "plugin_ppo.yaml"  # a project: configs/ beside env_configs/
    exp.write_text(PLUGIN_PPO.format(out=tmp_path / "runs", model=tmp_path / "models" / "tiny-gain",
                                     **{"env": "point_reach", **fmt}))
    return exp


def test_a_plugin_policy_and_simulator_train_under_ray_then_evaluate(tmp_path: Path) -> None:
    """Two PPO steps, then an evaluation of the trained plug-in policy on the plug-in simulator
    after the last step (runner.val_check_interval), in the same run: the evaluation an
    `embodied-rl eval` of the final checkpoint would make, without a second start-up."""
    exp = _project(tmp_path)
    proc = _cli("train", str(exp), "runner.val_check_interval=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    run = tmp_path / "runs" / "plugin_ppo"
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2] and "train/actor/policy_loss" in metrics[2]
    assert (run / "example_sink.jsonl").read_text().count("\n") == 2  # the plug-in's metric sink
    assert (run / "checkpoints" / "global_step_00000002" / "meta.json").is_file()
    assert "eval/success_once" in metrics[2] and "eval success" in proc.stdout
    assert list((run / "video").rglob("*.mp4"))  # the evaluation's: training records none


def test_a_plugin_that_does_not_import_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    exp = _project(tmp_path)
    proc = _cli("print-config", str(exp), cwd=tmp_path, pythonpath=None)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: plugins: module 'erl_example_plugin' does not import (ModuleNotFoundError")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "models").exists()


def test_a_plugin_that_takes_a_built_in_name_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "erl_clash_plugin.py").write_text(
        "from embodied_rl.envs.backend import register_simulator\n"
        "from erl_example_plugin import PointReachBackend\n"
        "register_simulator('maniskill')(type('Clash', (PointReachBackend,), {}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    with pytest.raises(ConfigError, match=r"^plugins: module 'erl_clash_plugin': simulator 'maniskill' registered twice"):
        load_plugins(["erl_clash_plugin"])
    with pytest.raises(ConfigError, match=r"^plugins: expected a list of module names"):
        load_plugins("erl_clash_plugin")


def test_plugin_keys_are_checked_by_the_plugins_config_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    exp = _project(tmp_path)
    cfg = load_config(str(exp))
    assert type(cfg.actor.model).__name__ == "OFTGainConfig" and cfg.actor.model.translation_gain == 0.5
    with pytest.raises(ConfigError, match=r"unknown key 'actor.model.translation_gian'.*translation_gain"):
        load_config(str(exp), ["actor.model.translation_gian=2"])
    with pytest.raises(ConfigError, match=r"runner.logger.logger_backends='nope' is not valid; choose one of: console, example_jsonl"):
        load_config(str(exp), ["runner.logger.logger_backends=[console,nope]"])


def test_an_installed_distribution_names_its_plugin_by_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `pip install` of a package declaring [project.entry-points."embodied_rl.plugins"] leaves."""
    (tmp_path / "erl_ep_plugin.py").write_text("LOADED = True\n")
    info = tmp_path / "erl_ep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: erl-ep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[embodied_rl.plugins]\nexample = erl_ep_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "erl_ep_plugin" in load_plugins()
    assert sys.modules["erl_ep_plugin"].LOADED and load_plugins() == []  # once per process


@pytest.mark.slow
def test_a_served_plugin_simulator_is_imported_by_its_server(tmp_path: Path) -> None:
    """An env server builds a simulator that a config plug-in registers: it imports the env worker's
    plug-in modules when the env_type is none of its own, and names the module where it cannot."""
    import numpy as np

    from embodied_rl.config.schema.env import EnvConfig, ServerConfig
    from embodied_rl.envs import make_env

    sys.path.insert(0, str(EXAMPLE))
    try:
        load_plugins(["erl_example_plugin"])
    finally:
        sys.path.remove(str(EXAMPLE))
    servers = {}
    for name, path in (("with", f"{EXAMPLE}:$PYTHONPATH"), ("without", "$PYTHONPATH")):
        servers[name] = tmp_path / f"python_{name}"
        servers[name].write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec {sys.executable} "$@"\n')
        servers[name].chmod(0o755)

    def served(python: Path) -> EnvConfig:
        return EnvConfig(env_type="point_reach", task_description="reach", init_params={"image_size": 32}, max_episode_steps=8,
                         server=ServerConfig(python=str(python)))

    env = make_env(served(servers["with"]), 1)
    try:
        first = env.reset()
        assert first.main_images.shape == (1, 32, 32, 3)
        result = env.chunk_step(np.zeros((1, 4, env.backend.action_dim), np.float32))
        assert result.obs.main_images.shape == (1, 32, 32, 3)
    finally:
        env.close()
    with pytest.raises(ConfigError) as err:
        make_env(served(servers["without"]), 1)
    assert "plugins: module 'erl_example_plugin' does not import (ModuleNotFoundError" in str(err.value)
    assert "\n" not in str(err.value)
