"""An example plug-in: a simulator, a policy type and a metric sink, registered on import."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from embodied_rl.config.schema.model import register_model_config
from embodied_rl.envs.backend import EnvSpec, SubEnv, register_simulator
from embodied_rl.envs.subproc_backend import SubprocBackend
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
from embodied_rl.models.registry import register_policy
from embodied_rl.sinks import METRIC_SINKS, SinkContext

INSTRUCTION = "move the blue dot onto the red dot"


@dataclass
class PointReachParams:
    image_size: int = field(default=64, metadata={"help": "Side of the square camera image."})
    state_dim: int = field(default=9, metadata={"help": "Size of the state vector (the point's xy, zero-padded)."})
    step_size: float = field(default=0.1, metadata={"help": "Distance moved per step at action 1."})
    success_radius: float = field(default=0.1, metadata={"help": "Success when the point is this close to the target."})


class PointReachEnv(SubEnv):
    """The point starts and the target lies at places drawn from the reset id; actions 0 and 1 move it."""

    action_dim = 7

    def __init__(self, params: PointReachParams) -> None:
        self.p = params
        self.pos = self.goal = np.zeros(2)

    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(reset_id)
        self.pos, self.goal = rng.uniform(-0.8, 0.8, 2), rng.uniform(-0.8, 0.8, 2)
        return self._obs()

    def step(self, action: np.ndarray, render: bool = True) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        before = np.linalg.norm(self.pos - self.goal)
        self.pos = np.clip(self.pos + self.p.step_size * np.clip(action[:2], -1, 1), -1, 1)
        dist = np.linalg.norm(self.pos - self.goal)
        success = bool(dist < self.p.success_radius)
        return self._obs(), float(before - dist), success, success

    def task(self) -> tuple[str, str]:
        return "PointReach", INSTRUCTION

    def _obs(self) -> dict[str, np.ndarray]:
        n = self.p.image_size
        image = np.full((n, n, 3), 200, np.uint8)
        for (x, y), color in ((self.goal, (220, 30, 30)), (self.pos, (30, 30, 220))):
            col, row = int((x + 1) / 2 * (n - 1)), int((1 - (y + 1) / 2) * (n - 1))
            image[max(row - 2, 0):row + 3, max(col - 2, 0):col + 3] = color
        state = np.zeros(self.p.state_dim, np.float32)
        state[:2] = self.pos
        return {"main_image": image, "state": state}


@dataclass
class PointReachFactory:
    params: PointReachParams

    def __call__(self, rank: int) -> PointReachEnv:
        return PointReachEnv(self.params)


@register_simulator("point_reach")
class PointReachBackend(SubprocBackend):
    params_cls: ClassVar[type] = PointReachParams

    def __init__(self, cfg, params: PointReachParams, num_envs: int, *, seed: int) -> None:
        super().__init__(PointReachFactory(params), num_envs, options=cfg.subproc, num_reset_ids=None)

    @classmethod
    def env_spec(cls, params: PointReachParams) -> EnvSpec:
        return EnvSpec(image_size=(params.image_size, params.image_size), cameras=1, state_dim=params.state_dim, action_dim=7)


@register_model_config("oft_gain")
@dataclass
class OFTGainConfig(OpenVLAOFTConfig):
    translation_gain: float = field(default=1.0, metadata={"help": "Factor on the first three action dimensions sent to the env."})


@register_policy("oft_gain")
class OFTGainPolicy(OpenVLAOFTPolicy):
    """OpenVLA-OFT whose env actions' translation part is scaled by `translation_gain`."""

    def _predict(self, inputs, **kwargs):
        out = super()._predict(inputs, **kwargs)
        out.actions[..., :3] *= self.model_cfg.translation_gain
        return out


@METRIC_SINKS.register("example_jsonl")
class ExampleJsonlSink:
    """Each step's finite metrics as one JSON line in <run_dir>/example_sink.jsonl."""

    def __init__(self, ctx: SinkContext) -> None:
        self._file = open(ctx.run_dir / "example_sink.jsonl", "a")  # noqa: SIM115 - closed in close()

    def log(self, step: int, values: dict[str, float | None]) -> None:
        self._file.write(json.dumps({"step": step, **{k: v for k, v in values.items() if v is not None}}) + "\n")
        self._file.flush()

    def rewind(self, step: int) -> None:
        """Kept as written: an example."""

    def close(self) -> None:
        self._file.close()
