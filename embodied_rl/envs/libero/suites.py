"""LIBERO task suites, their tasks, and the flat reset-id index over (task, init state) pairs.

Reset ids. The selected tasks T_0..T_{K-1} (suite order, filtered by `task_ids`) have n_k
recorded initial states each (50 in every shipped suite). Reset id r names the pair
    (task k, init state j)  with  r = offset_k + j,  offset_k = n_0 + ... + n_{k-1},
so with 50 states per task r = 50*k + j, and there are sum(n_k) reset ids in total.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from embodied_rl.envs.libero.setup import ensure_libero_ready
from embodied_rl.envs.reset_split import per_group_split
from embodied_rl.errors import ConfigError

#: LIBERO's own suites, in the order `libero_130` concatenates them
BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
SUITES = (*BASE_SUITES, "libero_130")
SUITE_NUM_TASKS = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90, "libero_130": 130}

#: episode length cap of the public OpenVLA / OpenVLA-OFT LIBERO evaluation (a little above the
#: longest training demo of each suite); libero_130 takes the largest, as it mixes all suites
SUITE_MAX_EPISODE_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
    "libero_130": 520,
}


@cache
def registered_num_tasks() -> dict[str, int]:
    """Tasks per suite (SUITES order) as LIBERO's benchmark registry defines them: the lengths of
    its `libero_task_map`, which `get_benchmark_dict()`'s suites and `task_maps` are built from.
    Read from that one data file, without importing `libero.libero` (which writes its config,
    imports torch and robosuite): the config rules call this before anything starts. Without
    LIBERO installed: SUITE_NUM_TASKS, the counts of libero 0.1.1."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("libero")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    path = next((Path(r) / "libero" / "benchmark" / "libero_suite_task_map.py" for r in roots), None)
    if path is None or not path.is_file():
        return dict(SUITE_NUM_TASKS)
    data = importlib.util.spec_from_file_location("_libero_suite_task_map", path)
    module = importlib.util.module_from_spec(data)
    data.loader.exec_module(module)
    counts = {s: len(module.libero_task_map[s]) for s in BASE_SUITES if s in module.libero_task_map}
    if len(counts) == len(BASE_SUITES):
        counts["libero_130"] = sum(counts.values())  # ours: the five concatenated
    return {s: counts[s] for s in SUITES if s in counts}


@dataclass(frozen=True)
class LiberoTask:
    suite: str  # the LIBERO suite the task belongs to (never libero_130)
    index: int  # position in that suite (LIBERO's default task order 0)
    name: str
    language: str  # the instruction given to the policy
    bddl_file: str
    init_states_file: str

    @property
    def task_id(self) -> str:
        """Stable, filename-safe id used in metrics, e.g. `libero_spatial_task3`."""
        return f"{self.suite}_task{self.index}"


def _check_suite(suite: str) -> None:
    if suite not in SUITES:
        raise ConfigError(f"unknown init_params.task_suite_name {suite!r}; valid: {', '.join(SUITES)}")


@cache
def suite_tasks(suite: str) -> tuple[LiberoTask, ...]:
    """All tasks of a suite (libero_130 = the five suites concatenated in BASE_SUITES order)."""
    _check_suite(suite)
    if suite == "libero_130":
        return tuple(t for s in BASE_SUITES for t in suite_tasks(s))
    ensure_libero_ready()
    from libero.libero import get_libero_path
    from libero.libero.benchmark import (
        task_maps,  # the task table; avoids Benchmark's print()
    )

    bddl_root, init_root = get_libero_path("bddl_files"), get_libero_path("init_states")
    return tuple(
        LiberoTask(
            suite=suite,
            index=i,
            name=t.name,
            language=t.language,
            bddl_file=os.path.join(bddl_root, t.problem_folder, t.bddl_file),
            init_states_file=os.path.join(init_root, t.problem_folder, t.init_states_file),
        )
        for i, t in enumerate(task_maps[suite].values())
    )


@lru_cache(maxsize=256)
def load_init_states(init_states_file: str) -> np.ndarray:
    """float64 [n_states, state_dim]: the recorded MuJoCo states a task's episodes start from."""
    import torch

    if not os.path.isfile(init_states_file):
        raise ConfigError(f"LIBERO init-state file {init_states_file} is missing; reinstall libero==0.1.1")
    # The .pruned_init files are numpy arrays pickled with torch.save: allow exactly the numpy
    # globals an array needs, so no other code can run at load time.
    from numpy._core import multiarray

    allowed = [(multiarray._reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
               type(np.dtype("float64"))]
    with torch.serialization.safe_globals(allowed):
        states = torch.load(init_states_file, weights_only=True)
    return np.asarray(states, dtype=np.float64)


class TaskIndex:
    """The selected tasks of a suite and the flat reset-id index over their init states."""

    def __init__(self, suite: str, task_ids: list[int] | None = None):
        tasks = suite_tasks(suite)
        if task_ids is not None:
            if len(task_ids) == 0:
                raise ConfigError("init_params.task_ids is empty; give task indices or null for all tasks")
            bad = [i for i in task_ids if not 0 <= int(i) < len(tasks)]
            if bad:
                raise ConfigError(
                    f"init_params.task_ids {bad} out of range for {suite} ({len(tasks)} tasks: 0..{len(tasks) - 1})"
                )
            if len(set(task_ids)) != len(task_ids):
                raise ConfigError(f"init_params.task_ids {list(task_ids)} has duplicates")
            tasks = tuple(tasks[int(i)] for i in task_ids)
        self.suite = suite
        self.tasks: tuple[LiberoTask, ...] = tasks
        counts = [len(load_init_states(t.init_states_file)) for t in tasks]
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def split(self, split: str) -> list[int]:
        """Reset ids of `split` (envs/reset_split.py): per task, init states 0..n-n//5-1 train, the rest eval."""
        return per_group_split(np.diff(self._offsets).tolist(), split)

    def __len__(self) -> int:
        """Number of reset ids = total init states over the selected tasks."""
        return int(self._offsets[-1])

    def locate(self, reset_id: int) -> tuple[LiberoTask, int]:
        """reset id -> (task, init state id) per the formula in the module docstring."""
        r = int(reset_id)
        if not 0 <= r < len(self):
            raise ValueError(f"LIBERO reset id {r} out of range [0, {len(self)}) for {self.suite}")
        k = bisect.bisect_right(self._offsets, r) - 1
        return self.tasks[k], r - int(self._offsets[k])

    def reset_id(self, task_pos: int, init_state_id: int) -> int:
        """Inverse of `locate`: position of the task among the selected ones, init state id -> reset id."""
        n = int(self._offsets[task_pos + 1] - self._offsets[task_pos])
        if not 0 <= init_state_id < n:
            raise ValueError(f"init state id {init_state_id} out of range [0, {n})")
        return int(self._offsets[task_pos]) + init_state_id
