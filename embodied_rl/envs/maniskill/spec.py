"""What a ManiSkill env config gives the policy and takes from it, known without starting
ManiSkill (`EnvSpec`): for the Panda arm of the offline tasks, where ManiSkill's own code fixes
the sizes; None for other robots and tasks (only the running simulator knows those)."""
from __future__ import annotations

from embodied_rl.envs.backend import EnvSpec
from embodied_rl.envs.maniskill.params import ManiSkillParams

# The robot each offline task loads by default (its robot_uids): panda_wristcam has a hand camera.
TASK_ROBOTS = {"PickCube-v1": "panda", "PushCube-v1": "panda", "PullCube-v1": "panda",
               "StackCube-v1": "panda_wristcam", "PegInsertionSide-v1": "panda_wristcam", "PlugCharger-v1": "panda_wristcam"}
PANDA_ROBOTS = ("panda", "panda_wristcam")
# Action size of the Panda controllers (arm + gripper), as ManiSkill's action_space gives them.
PANDA_ACTION_DIMS = {"pd_ee_delta_pose": 7, "pd_ee_target_delta_pose": 7, "pd_ee_pose": 7, "pd_ee_delta_pos": 4,
                     "pd_ee_target_delta_pos": 4, "pd_joint_delta_pos": 8, "pd_joint_target_delta_pos": 8,
                     "pd_joint_pos": 8, "pd_joint_vel": 8, "pd_joint_pos_vel": 15, "pd_joint_delta_pos_vel": 15}
# Size of each task's `state` observation with a Panda arm (qpos and qvel, then the task's extras),
# as ManiSkill 3.0.1 gives it: the privileged state before the episode clock is appended.
PANDA_PRIVILEGED_DIMS = {"PushCube-v1": 35, "PickCube-v1": 42, "PullCube-v1": 35, "StackCube-v1": 48,
                         "PegInsertionSide-v1": 43, "PlugCharger-v1": 46}
# Every offline task observes the TCP pose: the state is TCP xyz + quaternion and the two fingers
# (make.proprio_state), then the goal xyz with append_goal_to_state.
TCP_STATE_DIM, GOAL_DIM = 9, 3


def maniskill_env_spec(params: ManiSkillParams) -> EnvSpec:
    robot = params.robot_uids or TASK_ROBOTS.get(params.id)
    panda = params.id in TASK_ROBOTS and robot in PANDA_ROBOTS
    if params.wrist_camera == "none":
        cameras: int | None = 1
    elif params.wrist_camera != "auto":
        cameras = 2  # a named sensor, checked to exist when the env is made
    else:  # auto: the hand camera where the robot has one
        cameras = (2 if robot == "panda_wristcam" else 1) if panda else None
    return EnvSpec(
        image_size=(params.camera_heights, params.camera_widths),
        cameras=cameras,
        state_dim=TCP_STATE_DIM + GOAL_DIM * params.append_goal_to_state if panda else None,
        action_dim=PANDA_ACTION_DIMS.get(params.control_mode) if panda else None,
        privileged_state_dim=PANDA_PRIVILEGED_DIMS[params.id] + 1 if panda and params.privileged_state else None,
    )
