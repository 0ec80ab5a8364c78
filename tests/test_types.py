"""EnvObservation's batching helpers, the one implementation every layer uses."""
from __future__ import annotations

import numpy as np

from embodied_rl.types import EnvObservation
from tests.observations import observations

TASKS = [f"t{i}" for i in range(5)]
FIELDS = ("main_images", "states", "wrist_images")


def _obs(n: int, start: int = 0, wrist: bool = True) -> EnvObservation:
    """Rows start .. start + n - 1 of five distinct ones, each with its own task t0 .. t4."""
    return observations(n, size=2, state_dim=4, wrist=wrist, instructions=TASKS, start=start)


def _assert_rows(obs: EnvObservation, source: EnvObservation, index: list[int]) -> None:
    """obs holds source's rows `index`, in that order, in every field."""
    assert obs.task_descriptions == [source.task_descriptions[i] for i in index]
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(obs, name), getattr(source, name)[index], err_msg=name)


def test_concat_rows_copy_and_set_rows_agree():
    a, b = _obs(2), _obs(3, start=2)
    both = EnvObservation.concat([a, b])
    assert both.num_envs == 5 and both.task_descriptions == ["t0", "t1", "t2", "t3", "t4"]
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(both, name), np.concatenate([getattr(a, name), getattr(b, name)]), err_msg=name)
        assert len({row.tobytes() for row in getattr(both, name)}) == 5, name  # rows tell apart
    picked = both.rows([4, 1])
    _assert_rows(picked, both, [4, 1])
    masked = both.rows(np.array([True, False, False, False, True]))
    _assert_rows(masked, both, [0, 4])
    copy = both.copy()
    _assert_rows(copy, both, [0, 1, 2, 3, 4])
    copy.main_images[0] = 255 - copy.main_images[0]
    np.testing.assert_array_equal(both.main_images[0], a.main_images[0])  # a copy shares no memory
    before = both.copy()
    both.set_rows(np.array([0, 2]), picked)
    _assert_rows(both, before, [4, 1, 1, 3, 4])


def test_observations_without_a_wrist_camera():
    both = EnvObservation.concat([_obs(1, wrist=False), _obs(1, start=1, wrist=False)])
    assert both.wrist_images is None and both.rows([1]).wrist_images is None and both.copy().wrist_images is None
