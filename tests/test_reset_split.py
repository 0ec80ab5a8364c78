"""Held-out initial states by construction: train and eval reset ids never overlap."""
from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.config.loader import (
    CONFIG_DIR,
    ENV_CONFIG_DIR,
    available,
    read_env_config,
)
from embodied_rl.config.typecheck import build
from embodied_rl.configure import load_config
from embodied_rl.envs import get_simulator
from embodied_rl.envs.reset_split import (
    EVAL_SEEDS_START,
    SEED_LIMIT,
    overlaps,
    per_group_split,
    seed_split,
)
from embodied_rl.envs.vector_env import ChunkedVectorEnv

ENV_CONFIGS = available(ENV_CONFIG_DIR)


def _spaces(env_name: str) -> dict[str, object]:
    """Each split's reset ids of an env config file as shipped (its own init_params)."""
    env = read_env_config(ENV_CONFIG_DIR / f"{env_name}.yaml")
    backend = get_simulator(env["env_type"])
    params = build(backend.params_cls, dict(env["init_params"]), f"{env_name}.init_params")
    return {split: backend.reset_id_space(params, split) for split in ("train", "eval", "all")}


def test_env_sections_default_to_their_own_split() -> None:
    for experiment in available(CONFIG_DIR):
        cfg = load_config(experiment, plan=False, skip=("sft_data",))
        assert (cfg.env.train.reset_id_split, cfg.env.eval.reset_id_split) == ("train", "eval"), experiment


@pytest.mark.parametrize("env_name", ENV_CONFIGS)
def test_every_shipped_env_config_holds_out_its_eval_states(env_name: str) -> None:
    spaces = _spaces(env_name)
    train, ev, every = (set(spaces[s]) if isinstance(spaces[s], list) else spaces[s] for s in ("train", "eval", "all"))
    if isinstance(every, range):  # seeds: two ranges that meet without overlapping
        assert train.start == 0 and train.stop == ev.start == EVAL_SEEDS_START and ev.stop == every.stop == SEED_LIMIT
    else:  # a finite set of recorded states (LIBERO): both splits non-empty, disjoint, together all
        assert train and ev and not train & ev and train | ev == every


def test_libero_holds_out_the_last_fifth_of_every_task() -> None:
    pytest.importorskip("libero")
    spaces = _spaces("libero_spatial")
    tasks = len(spaces["all"]) // 50
    assert tasks == 10 and spaces["eval"] == [50 * t + j for t in range(tasks) for j in range(40, 50)]


def test_split_arithmetic() -> None:
    assert per_group_split([5, 3], "train") == [0, 1, 2, 3, 5, 6] and per_group_split([5, 3], "eval") == [4, 7]
    assert per_group_split([1], "eval") == [] and per_group_split([1], "train") == [0]
    assert overlaps("train", "train") and overlaps("all", "eval") and not overlaps("train", "eval")
    with pytest.raises(ValueError, match="reset_id_split must be one of"):
        seed_split("test")


class _Sized:
    """A stand-in backend for reset-id arithmetic only (never stepped)."""

    def __init__(self, n: int) -> None:
        self.num_envs, self.action_dim = n, 7

    def num_reset_ids(self):
        return None


def test_drawn_and_explicit_ids_stay_in_the_split() -> None:
    cfg = load_config("maniskill_ppo_tiny", plan=False).env.eval
    env = ChunkedVectorEnv(_Sized(4), cfg, reset_id_space=seed_split("eval"))
    drawn = [env.draw_reset_id(i, k) for i in range(4) for k in range(50)]
    assert all(EVAL_SEEDS_START <= d < SEED_LIMIT for d in drawn) and len(set(drawn)) == len(drawn)
    env.set_reset_ids(np.full(4, EVAL_SEEDS_START + 7))
    with pytest.raises(ValueError, match=r"ids \[11\] are not in the 'eval' split"):
        env.set_reset_ids([11, EVAL_SEEDS_START, EVAL_SEEDS_START, EVAL_SEEDS_START])
