"""EnvObservation's batching helpers, the one implementation every layer uses."""
from __future__ import annotations

import numpy as np

from embodied_rl.types import EnvObservation


def _obs(n: int, start: int = 0, wrist: bool = True) -> EnvObservation:
    ids = np.arange(start, start + n)
    return EnvObservation(main_images=np.broadcast_to(ids[:, None, None, None], (n, 2, 2, 3)).astype(np.uint8),
                          states=ids[:, None].astype(np.float32).repeat(4, 1), task_descriptions=[f"t{i}" for i in ids],
                          wrist_images=(ids[:, None, None, None] * np.ones((n, 2, 2, 3))).astype(np.uint8) if wrist else None)


def test_concat_rows_copy_and_set_rows_agree():
    a, b = _obs(2), _obs(3, start=2)
    both = EnvObservation.concat([a, b])
    assert both.num_envs == 5 and both.task_descriptions == ["t0", "t1", "t2", "t3", "t4"]
    assert both.states[:, 0].tolist() == [0, 1, 2, 3, 4] and both.wrist_images[:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4]
    picked = both.rows([4, 1])
    assert picked.states[:, 0].tolist() == [4, 1] and picked.task_descriptions == ["t4", "t1"]
    masked = both.rows(np.array([True, False, False, False, True]))
    assert masked.states[:, 0].tolist() == [0, 4] and masked.main_images[:, 0, 0, 0].tolist() == [0, 4]
    copy = both.copy()
    copy.main_images[0] = 9
    assert both.main_images[0, 0, 0, 0] == 0  # a copy shares no memory
    both.set_rows(np.array([0, 2]), picked)
    assert both.states[:, 0].tolist() == [4, 1, 1, 3, 4] and both.task_descriptions == ["t4", "t1", "t1", "t3", "t4"]
    assert both.wrist_images[:, 0, 0, 0].tolist() == [4, 1, 1, 3, 4]


def test_observations_without_a_wrist_camera():
    both = EnvObservation.concat([_obs(1, wrist=False), _obs(1, start=1, wrist=False)])
    assert both.wrist_images is None and both.rows([1]).wrist_images is None and both.copy().wrist_images is None
