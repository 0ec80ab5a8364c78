"""Turn a robosuite observation dict into the SubEnv observation (images oriented, 8-D proprio)."""
from __future__ import annotations

import numpy as np

MAIN_CAMERA = "agentview"
WRIST_CAMERA = "robot0_eye_in_hand"
#: controller-space no-op: zero delta pose, gripper open (-1 opens, +1 closes in LIBERO's controller)
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
ACTION_DIM = 7
STATE_DIM = 8


def orient(raw: np.ndarray, orientation: str) -> np.ndarray:
    """uint8 [H, W, 3] raw MuJoCo frame (rows bottom-up) -> policy image.

    upright:   flip rows only (`img[::-1]`): the scene as a camera sees it.
    rotate180: flip rows and columns (`img[::-1, ::-1]`): what OpenVLA/OFT/openpi LIBERO
               checkpoints were trained on (a left-right mirror of the upright view).
    """
    if orientation == "upright":
        return np.ascontiguousarray(raw[::-1])
    if orientation == "rotate180":
        return np.ascontiguousarray(raw[::-1, ::-1])
    raise ValueError(f"unknown image orientation {orientation!r}")


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """float [4] unit quaternion (x, y, z, w; robosuite order) -> float [3] axis * angle.

    The angle is 2*acos(w) in [0, 2*pi]; a (near-)identity rotation maps to zeros.
    """
    q = np.asarray(quat_xyzw, dtype=np.float64)
    w = float(np.clip(q[3], -1.0, 1.0))
    sin_half = np.sqrt(1.0 - w * w)
    if sin_half < 1e-10:
        return np.zeros(3)
    return q[:3] * (2.0 * np.arccos(w) / sin_half)


def proprio(raw_obs: dict) -> np.ndarray:
    """float32 [8]: eef position (3), eef axis-angle (3), gripper finger qpos (2)."""
    return np.concatenate(
        [
            raw_obs["robot0_eef_pos"],
            quat_to_axis_angle(raw_obs["robot0_eef_quat"]),
            raw_obs["robot0_gripper_qpos"],
        ]
    ).astype(np.float32)


def convert(raw_obs: dict, orientation: str, wrist: bool) -> dict[str, np.ndarray]:
    """robosuite obs dict -> {"main_image", "wrist_image"?, "state"} (the SubEnv contract)."""
    out = {"main_image": orient(raw_obs[f"{MAIN_CAMERA}_image"], orientation), "state": proprio(raw_obs)}
    if wrist:
        out["wrist_image"] = orient(raw_obs[f"{WRIST_CAMERA}_image"], orientation)
    return out
