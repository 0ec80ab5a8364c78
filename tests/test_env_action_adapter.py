"""Action adapter: scaling, offsets, clipping and the gripper-convention registry."""
from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.config.schema.env import ActionAdapterConfig, GripperConfig
from embodied_rl.envs.action_adapter import ActionAdapter, gripper_conventions
from embodied_rl.errors import ConfigError


def test_identity_passes_actions_through():
    a = np.random.default_rng(0).uniform(-1, 1, (2, 4, 7)).astype(np.float32)
    out = ActionAdapter(ActionAdapterConfig(), 7)(a)
    assert out.dtype == np.float32 and np.array_equal(out, a)


def test_scale_offset_clip_per_dim():
    cfg = ActionAdapterConfig(scale=[10.0] * 6 + [1.0], offset=[0.5], clip=[-1.0, 1.0])
    a = np.array([[0.01, -0.02, 0.3, 0.0, 0.0, -0.2, 0.2]], np.float32)
    out = ActionAdapter(cfg, 7)(a)
    np.testing.assert_allclose(out, [[0.6, 0.3, 1.0, 0.5, 0.5, -1.0, 0.7]], rtol=1e-6)


@pytest.mark.parametrize(
    "convention, raw, expected",
    [
        ("binarize", [0.2, 0.5, 0.51, 0.9], [-1, -1, 1, 1]),  # 2*(a>0.5)-1
        ("flip_binarize", [0.2, 0.4, 0.6, 1.0], [1, 1, -1, -1]),  # -sign(2a-1)
        ("none", [0.2, 0.4, 0.6, 1.0], [0.2, 0.4, 0.6, 1.0]),
    ],
)
def test_gripper_conventions(convention, raw, expected):
    cfg = ActionAdapterConfig(scale=[2.0], gripper=GripperConfig(convention=convention))
    a = np.zeros((4, 7), np.float32)
    a[:, -1] = raw
    out = ActionAdapter(cfg, 7)(a)
    # `none` leaves the gripper to scale/offset; the others replace the raw value
    want = np.asarray(expected, np.float32) * (2.0 if convention == "none" else 1.0)
    np.testing.assert_allclose(out[:, -1], want)
    assert np.all(out[:, :-1] == 0)


def test_bad_adapter_configs_name_the_key():
    with pytest.raises(ConfigError, match=r"env.action_adapter.scale has 3 values"):
        ActionAdapter(ActionAdapterConfig(scale=[1, 2, 3]), 7)
    with pytest.raises(ConfigError, match=r"gripper.convention='flip'.*valid: binarize, flip_binarize, none"):
        ActionAdapter(ActionAdapterConfig(gripper=GripperConfig(convention="flip")), 7)
    with pytest.raises(ConfigError, match=r"env.action_adapter.clip"):
        ActionAdapter(ActionAdapterConfig(clip=[1.0, -1.0]), 7)
    assert set(gripper_conventions()) >= {"none", "binarize", "flip_binarize"}
