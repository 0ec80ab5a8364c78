"""Held-out initial states by construction: which reset ids each split draws from.

`env.<mode>.reset_id_split` names a split; train and eval are disjoint for every simulator, so
an evaluation on the eval split never starts from a state training could have drawn. `all` is
every state (LIBERO's official protocol evaluates all 50 init states of each task).
"""
from __future__ import annotations

from collections.abc import Sequence

SPLITS = ("train", "eval", "all")
SEED_LIMIT = 2**31 - 1  # reset ids that are seeds (ManiSkill) lie in [0, SEED_LIMIT)
EVAL_SEEDS_START = 2**30
# Bounded state sets (LIBERO's recorded init states per task): the last fifth of each task's
# states is held out for evaluation (50 -> states 0-39 train, 40-49 eval).
EVAL_FRACTION_DENOMINATOR = 5


def seed_split(split: str) -> range:
    """Reset ids that are simulator seeds: train [0, 2^30), eval [2^30, 2^31 - 1)."""
    return {"train": range(EVAL_SEEDS_START), "eval": range(EVAL_SEEDS_START, SEED_LIMIT),
            "all": range(SEED_LIMIT)}[_checked(split)]


def per_group_split(counts: Sequence[int], split: str) -> list[int]:
    """Flat reset ids over groups of states (LIBERO: the init states of each selected task, in
    order), each group split on its own so every task is in both splits."""
    _checked(split)
    ids, offset = [], 0
    for n in counts:
        n_eval = max(1, n // EVAL_FRACTION_DENOMINATOR) if n > 1 else 0
        first, stop = {"train": (0, n - n_eval), "eval": (n - n_eval, n), "all": (0, n)}[split]
        ids.extend(range(offset + first, offset + stop))
        offset += n
    return ids


def overlaps(a: str, b: str) -> bool:
    """Whether two splits share reset ids."""
    return a == b or "all" in (a, b)


def _checked(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"reset_id_split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def spread_reset_ids(num_states: int, num_envs: int, group_size: int = 1) -> list[int]:
    """Reset id per sub-env: groups of `group_size` share one, groups spaced evenly over [0, num_states).

    With LIBERO's r = 50 * task + init_state, N groups over T tasks cover every task equally."""
    groups = num_envs // group_size
    return [(g * num_states) // groups for g in range(groups) for _ in range(group_size)]
