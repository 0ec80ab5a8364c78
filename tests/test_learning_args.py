"""The RL phases benchmarks/learning.py runs are the shipped recipe configs plus sizes: every key
a phase changes beyond SIZE_KEYS would be a training knob the config lacks (the phases themselves
run in tests/test_learning.py)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from embodied_rl.config.loader import to_dict
from embodied_rl.configure import load_config
from embodied_rl.distributed.resources import Resources

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("learning_benchmark", REPO / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = learning  # its dataclasses look their module up there
_spec.loader.exec_module(learning)

TWO_CORES = Resources(1, 2, "cpu")
PHASES = [(task, algo) for task, t in learning.TASKS.items() for algo in t.rl_configs]
# Keys that follow from a SIZE_KEY (the run name names the logs and videos; the seed seeds the actor).
FOLLOWERS = ("runner.logger.log_path", "runner.logger.experiment_name", "actor.seed", "env.train.video_cfg.video_base_dir", "env.eval.video_cfg.video_base_dir",
             "rollout.model.model_path")


def phase(argv: list[str], algo: str) -> tuple[str, list[str]]:
    """(config, overrides) of the phase, as the benchmark passes them to `embodied-rl train`."""
    args = learning.rl_args(algo, 0, 4, learning.parse_args(argv))
    return args[1], args[2:]


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def changed_keys(config: str, overrides: list[str]) -> set[str]:
    """The resolved keys that `overrides` change in `config` on 2 cores."""
    base = flat(to_dict(load_config(config, resources=TWO_CORES)))
    run = flat(to_dict(load_config(config, overrides, resources=TWO_CORES)))
    return {k for k in base.keys() | run.keys() if base.get(k) != run.get(k)}


@pytest.mark.parametrize(("task", "algo"), PHASES)
def test_a_phase_changes_only_sizes_of_its_recipe_config(task: str, algo: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    config, overrides = phase(["--task", task], algo)
    # The benchmark's SFT export of seed 0 (models/sft_s0 in its working directory): here the
    # shipped SFT policy the config starts from, so every rule runs on both sides.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sft_s0").symlink_to(load_config(config, resources=TWO_CORES).actor.model.model_path)
    assert config == learning.TASKS[task].rl_configs[algo]
    assert {o.split("=", 1)[0] for o in overrides} <= set(learning.SIZE_KEYS), overrides
    assert changed_keys(config, overrides) <= set(learning.SIZE_KEYS) | set(FOLLOWERS)


def test_size_keys_hold_no_training_knob() -> None:
    """What the benchmark may set: where the run starts and how long, how it is evaluated, its name."""
    knobs = [k for k in learning.SIZE_KEYS if k.startswith(("actor.optim", "actor.model.", "algorithm.", "env.train"))]
    assert knobs == ["actor.model.model_path", "algorithm.eval_rollout_epoch"]


def test_push_cube_runs_the_main_job_config_for_90_steps() -> None:
    config, overrides = phase([], "ppo")
    assert config == "maniskill_ppo_from_sft" and "runner.max_steps=90" in overrides
    # PickCube's phases run their configs' own step counts
    assert not any(o.startswith("runner.max_steps=") for o in phase(["--task", "pick_cube"], "grpo")[1])


def test_ablations_and_minimal_runs_are_explicit() -> None:
    _, overrides = phase(["--task", "pick_cube", "--rl-set", "actor.model.top_k=5"], "ppo")
    assert overrides[-1] == "actor.model.top_k=5"  # last: it wins over the config
    _, minimal = phase(["--minimal"], "ppo")
    assert {o.split("=", 1)[0] for o in minimal} <= set(learning.SIZE_KEYS) | set(learning.MINIMAL_KEYS)
    assert "runner.max_steps=1" in minimal and "algorithm.rollout_epoch=1" in minimal


def test_an_algorithm_without_a_shipped_config_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        learning.parse_args(["--task", "push_cube", "--algos", "grpo"])
    assert "no shipped push_cube config" in capsys.readouterr().err
