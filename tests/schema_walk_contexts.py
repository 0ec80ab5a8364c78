"""Contexts of tests/test_schema_walk.py: the walk base (a small maniskill_ppo_tiny), the
simulator settings every context gets, and loading a config in a context (a tuple of overrides,
'@<name>' picking another experiment config). Not a test module."""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import time
from collections.abc import Iterator
from typing import Any

from embodied_rl.config.loader import compose
from embodied_rl.config.schema import RootConfig
from embodied_rl.errors import ConfigError
from tests.schema_walk_probes import Outcome, override, ray_state, try_load

BASE = "maniskill_ppo_tiny"
# Small and fast, and chosen so every consumer runs: 2 env workers x 2 sub-envs, episodes
# of 6 steps (2 chunks of 4, truncated inside the second), 8 samples = one global batch. Image
# sizes and simulator settings: SIM_SETTINGS below. The test appends the walk's model path.
BASE_OVERRIDES = [
    "cluster.num_cpu_slots=2", "rollout.pipeline_stage_num=1",
    "env.train.total_num_envs=4", "env.eval.total_num_envs=4",
    "env.train.max_episode_steps=6", "env.eval.max_episode_steps=6", "actor.model.num_action_chunks=4",
    "actor.micro_batch_size=4", "actor.global_batch_size=8",
    "actor.model.create_preset.image_size=56", "runner.output_dir=runs",
]

MODES = ("train", "eval")
# Set in every env mode that runs the simulator, whichever env config the context picked: small
# images, and settings that let train and eval share one simulator.
SIM_SETTINGS: dict[str, dict[str, Any]] = {
    # A robot with a hand camera, so the wrist-camera keys have something to select.
    "maniskill": {"camera_heights": 32, "camera_widths": 32, "reward_mode": "normalized_dense", "robot_uids": "panda_wristcam"},
    # One task (a sub-env builds a task's scene on first use), no settle steps.
    "libero": {"camera_heights": 32, "camera_widths": 32, "task_ids": [0], "num_steps_wait": 0},
}
# The walk base of a key in another simulator's init_params: an experiment config running it.
SIM_BASE = {"libero": "libero_grpo_tiny"}
_ENV_PICK = re.compile(r"^env\.(train|eval)=")


def _split(ctx: tuple[str, ...]) -> tuple[str, list[str]]:
    """(experiment, overrides) of a context; '@<name>' picks another experiment config."""
    names = [c[1:] for c in ctx if c.startswith("@")]
    return (names[0] if names else BASE), [c for c in ctx if not c.startswith("@")]


@functools.cache
def _sim_overrides(ctx: tuple[str, ...]) -> tuple[str, ...]:
    """SIM_SETTINGS of the simulator each env mode runs in this context."""
    name, ctx_ov = _split(ctx)
    tree = compose(name, [*BASE_OVERRIDES, *(c for c in ctx_ov if _ENV_PICK.match(c))])
    out: list[str] = []
    for mode in MODES:
        env = tree["env"][mode]
        sim, params = env.get("env_type"), env.get("init_params") or {}
        out += [override(f"env.{mode}.init_params.{k}", v, k in params) for k, v in SIM_SETTINGS.get(sim, {}).items()]
    return tuple(out)


def _overrides(ctx: tuple[str, ...], *extra: str) -> tuple[str, list[str]]:
    name, ctx_ov = _split(ctx)
    try:
        sim = list(_sim_overrides(ctx))
    except ConfigError:  # a context that does not compose: load_config reports it
        sim = []
    return name, [*BASE_OVERRIDES, *sim, *ctx_ov, *extra]


_LOADED: dict[tuple, RootConfig | Outcome] = {}
LOAD_SECONDS: list[float] = []  # of each load_config the walk ran (its summary line)


def load_in(ctx: tuple[str, ...], *extra: str) -> RootConfig | Outcome:
    """Load the walk base (or '@<experiment>') with the context's and the change's overrides.

    A walk loads the same contexts for many keys (~0.2 s a load): each is loaded once per Ray
    state (a session's resources are what planning reads) and handed out as a copy, since
    planning fills derived keys in place."""
    key = (tuple(BASE_OVERRIDES), ctx, extra, ray_state())
    if key not in _LOADED:
        t0 = time.perf_counter()
        _LOADED[key] = try_load(*_overrides(ctx, *extra))
        LOAD_SECONDS.append(time.perf_counter() - t0)
    got = _LOADED[key]
    return got if isinstance(got, Outcome) else copy.deepcopy(got)


@functools.cache
def _tree(ctx: tuple[str, ...]) -> dict:
    return compose(*_overrides(ctx))


def env_type_in(ctx: tuple[str, ...], mode: str) -> str | None:
    try:
        return _tree(ctx)["env"][mode]["env_type"]
    except ConfigError:
        return None


def present(ctx: tuple[str, ...], path: str) -> bool:
    """Whether a plain `key=` sets the key in the context: it exists in the composed tree (or in a
    null optional section of it), or it is a key of the model type's own config class
    (actor.model's keys need not be in the YAML); else `+key=` adds it."""
    node: Any = _tree(ctx)
    for part in path.split("."):
        if node is None:  # a null optional section (env.train.server): `key=` fills it from its defaults
            return True
        if not isinstance(node, dict) or part not in node:
            return _model_type_key(ctx, path)
        node = node[part]
    return True


def _model_type_key(ctx: tuple[str, ...], path: str) -> bool:
    section, _, key = path.rpartition(".")
    if section != "actor.model":
        return False
    from embodied_rl.config.schema.model import ModelConfig

    return key in {f.name for f in dataclasses.fields(ModelConfig.variant(_tree(ctx)["actor"]["model"]))}


class Changes:
    """A key's changed values in one context, each loaded on first use: most keys are decided by
    their first accepted value, and a load takes ~0.2 s. `rejected` holds the refused ones
    (by load_config, or by a consumer) and `gating` the first load rejection naming `switch`,
    the setting the context turned on (the key gates it)."""

    def __init__(self, ctx: tuple[str, ...], path: str, values: list[Any], switch: str | None) -> None:
        self.ctx, self.switch = ctx, switch
        self.overrides = [override(path, v, present(ctx, path)) for v in values]
        self.loaded: list[RootConfig | None] = []
        self.rejected: dict[str, str] = {}
        self.gating: tuple[str, str] | None = None

    def _load_next(self) -> None:
        ov = self.overrides[len(self.loaded)]
        cfg = load_in(self.ctx, ov)
        if not isinstance(cfg, Outcome):
            self.loaded.append(cfg)
            return
        self.loaded.append(None)
        self.rejected[ov] = cfg.summary
        if self.gating is None and self.switch and self.switch.rsplit(".", 1)[-1] in cfg.summary:
            self.gating = ov, cfg.summary

    def accepted(self) -> Iterator[tuple[str, RootConfig]]:
        """(override, config) of the accepted values, in order, loading as far as asked."""
        for k, ov in enumerate(self.overrides):
            if k == len(self.loaded):
                self._load_next()
            if (cfg := self.loaded[k]) is not None:
                yield ov, cfg

    def load_all(self) -> None:
        while len(self.loaded) < len(self.overrides):
            self._load_next()
