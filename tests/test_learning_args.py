"""The RL phases benchmarks/learning.py runs: each task's PPO settings reach `embodied-rl train`,
and the command line still overrides them (the phases themselves run in tests/test_learning.py)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("learning_benchmark", REPO / "benchmarks" / "learning.py")
learning = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = learning  # its dataclasses look their module up there
_spec.loader.exec_module(learning)


def settings(argv: list[str], algo: str) -> dict[str, str]:
    """key -> value of the phase's overrides, the last one winning as in the config loader."""
    args = learning.rl_args(algo, 0, 4, learning.parse_args(argv))
    return dict(arg.split("=", 1) for arg in args[2:])


def test_pick_cube_ppo_samples_128_episodes_from_every_bin() -> None:
    ppo = settings(["--task", "pick_cube"], "ppo")
    # 16 training sub-envs x 8 rollout epochs x 5 chunk steps, in 4 minibatches
    assert (ppo["env.train.total_num_envs"], ppo["algorithm.rollout_epoch"], ppo["actor.global_batch_size"]) == ("16", "8", "160")
    assert ppo["algorithm.sampling_params.top_k"] == "null"
    assert ppo["actor.model.use_proprio"] == "true"
    assert ppo["runner.max_steps"] == "30"  # 128 episodes per step: 90 steps would not fit the recipe's 90 minutes


def test_pick_cube_grpo_and_push_cube_ppo_keep_64_episodes_and_the_top_3_bins() -> None:
    for argv, algo in ((["--task", "pick_cube"], "grpo"), ([], "ppo")):
        phase = settings(argv, algo)
        assert (phase["algorithm.rollout_epoch"], phase["actor.global_batch_size"]) == ("4", "80"), (argv, algo)
        assert phase["algorithm.sampling_params.top_k"] == "3", (argv, algo)
    assert settings([], "ppo")["runner.max_steps"] == "90"


def test_the_command_line_overrides_the_task_settings() -> None:
    ppo = settings(["--task", "pick_cube", "--rollout-epochs", "2", "--rl-set", "algorithm.sampling_params.top_k=5"], "ppo")
    assert (ppo["algorithm.rollout_epoch"], ppo["actor.global_batch_size"]) == ("2", "40")
    assert ppo["algorithm.sampling_params.top_k"] == "5"
    minimal = settings(["--task", "pick_cube", "--minimal"], "ppo")
    assert (minimal["algorithm.rollout_epoch"], minimal["runner.max_steps"]) == ("1", "1")
