"""Skip SAPIEN's BRDF lookup table in scenes without an environment map (CPU rendering).

The first picture a process takes makes SAPIEN's renderer build its default BRDF lookup table
(a compute shader of split-sum GGX integrals): ~6.5 s of CPU under software Vulkan, in every
simulator process, each time one starts. Its shaders read the table only to weight the
environment map's specular light, and a scene with no environment map (the ManiSkill tabletop
tasks) lights nothing from it, so any finite table gives the same pixels
(tests/test_env_brdf_lut.py compares them). A camera given a table of its own skips the build:
every camera of such a scene gets a 1x1 zero table before its first picture. A scene with an
environment map keeps SAPIEN's table.
"""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _zero_table() -> Any:
    """The process's one 1x1 table (made on first use: a texture needs a render system to exist)."""
    import numpy as np
    import sapien

    return sapien.render.RenderTexture(np.zeros((1, 1, 4), np.float32), 2, "R32G32B32A32Sfloat")


def give_cameras_a_table(scene: Any) -> int:
    """Give every camera of a ManiSkill scene (`env.unwrapped.scene`) without an environment map
    the zero table; returns how many cameras got it."""
    given = 0
    for sub_scene in scene.sub_scenes:
        system = sub_scene.render_system
        if system.get_cubemap() is not None:
            continue
        for camera in system.cameras:
            camera.set_texture("BRDFLUT", _zero_table())
            given += 1
    return given


def install() -> None:
    """Make every ManiSkill env of this process give its cameras the table once they are added
    to the scene (`BaseEnv._setup_sensors`), before its first picture, which `gym.make` takes."""
    from mani_skill.envs.sapien_env import BaseEnv

    setup = BaseEnv._setup_sensors
    if getattr(setup, "gives_brdf_table", False):
        return

    def setup_sensors(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = setup(self, *args, **kwargs)
        give_cameras_a_table(self.scene)
        return out

    setup_sensors.gives_brdf_table = True  # type: ignore[attr-defined]
    BaseEnv._setup_sensors = setup_sensors
