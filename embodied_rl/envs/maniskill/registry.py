"""ManiSkill's closed sets, read from its registries without building a scene: task ids, robot
uids, the control modes of a robot, the camera names of a task and robot. The config rules check
`init_params` against them before anything starts (envs/checks.py).

Importing `mani_skill.envs` (which fills the task registry) costs ~3 s of CPU, paid by every
command that checks a ManiSkill config (print-config, train, eval, plan). The answers are
therefore kept in a per-user cache file (`FactCache`), valid while the installed ManiSkill
files and this module stay unchanged; a name the cache does not know is looked up in the live
registries (a plug-in may register tasks), so the cache never refuses a valid name. Control modes and cameras are
declared by properties written for a built robot and scene; they are read here as far as that
works without one (see each function), and left unchecked where it does not: the running
simulator still checks them when the env is made (make.py).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from embodied_rl.config.typecheck import not_in_set
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.errors import ConfigError
from embodied_rl.fact_cache import FactCache

#: init_params.wrist_camera values that name no sensor
WRIST_CHOICES = ("auto", "none")


def _registries() -> tuple[dict[str, Any], dict[str, Any]]:
    """(REGISTERED_ENVS, REGISTERED_AGENTS), after importing the task modules that fill them."""
    import embodied_rl.envs.maniskill.make  # noqa: F401  (silences sapien's libvulkan warning first)

    try:
        import mani_skill.envs  # noqa: F401  (registers the tasks)
        from mani_skill.agents.registration import REGISTERED_AGENTS
        from mani_skill.utils.registration import REGISTERED_ENVS
    except ImportError as err:
        raise ConfigError(f"env_type maniskill needs the mani_skill package, which cannot be imported ({err}); run: bash scripts/setup.sh") from None
    return REGISTERED_ENVS, REGISTERED_AGENTS


def _fingerprint() -> str | None:
    """Identity of what the cached answers were read from: the mani_skill files that define tasks
    and robots (paths, sizes, mtimes) and this module. None where mani_skill is not installed."""
    spec = importlib.util.find_spec("mani_skill")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    files = [root / "utils" / "registration.py", Path(__file__)]
    for sub in ("envs", "agents"):
        for dirpath, dirnames, filenames in os.walk(root / sub):
            dirnames.sort()
            files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
    return hashlib.sha256(repr(stats).encode()).hexdigest()[:32]


@cache
def _cache() -> FactCache:
    # Once ManiSkill is imported (an env worker, a test), the live registries answer for free.
    from embodied_rl.process_env import embodied_rl_home

    return FactCache(embodied_rl_home() / "maniskill_registry.json", _fingerprint(), live=lambda: "mani_skill.envs" in sys.modules)


def _builtin(registry: dict[str, Any], attr: str) -> list[str]:
    """The names ManiSkill itself registers (a plug-in's are left to the live registry)."""
    return sorted(k for k, spec in registry.items() if getattr(spec, attr).__module__.startswith("mani_skill."))


def _known(key: str, name: str, index: int, attr: str) -> list[str]:
    """ManiSkill's own task ids (key "tasks") or robot uids ("robots") from the cache when they
    hold `name`; else every registered one, live, so the cache never refuses a plug-in's name."""
    cached = _cache().get(key, lambda: _builtin(_registries()[index], attr))
    return cached if name in cached else sorted(_registries()[index])


def default_robot(task_id: str) -> str | None:
    """The robot a task loads when robot_uids is not given: the default of its constructor's
    robot_uids argument; None where that is not one robot (multi-robot tasks, fixed robots)."""
    init = inspect.signature(_registries()[0][task_id].cls.__init__).parameters.get("robot_uids")
    default = None if init is None else init.default
    return default if isinstance(default, str) else None


class _StandIn:
    """Whatever a built robot would hold (joints, links, its articulation): controller configs
    only store such values, so a property that reads them still names its control modes."""

    def __getattr__(self, name: str) -> _StandIn:
        return _StandIn()

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn()

    def __getitem__(self, key: Any) -> _StandIn:
        return _StandIn()

    def __iter__(self):
        return iter(())


@cache
def control_modes(robot: str | None) -> tuple[str, ...]:
    """The control modes `robot` declares (the keys of its agent class's `_controller_configs`),
    read on an unbuilt instance whose missing attributes (set when SAPIEN loads the robot) are
    stand-ins. Where that fails for the robot, or the robot is unknown: every mode that any
    registered robot declares, a superset, so a mode one robot lacks passes here and fails at start."""
    agents = _registries()[1]
    if robot in agents:
        modes = _declared_modes(agents[robot].agent_cls)
        if modes is not None:
            return modes
    return tuple(sorted({m for spec in agents.values() for m in _declared_modes(spec.agent_cls) or ()}))


def _declared_modes(agent_cls: type) -> tuple[str, ...] | None:
    unbuilt = object.__new__(type("Unbuilt", (agent_cls,), {"__getattr__": lambda self, name: _StandIn()}))
    try:
        return tuple(unbuilt._controller_configs)
    except Exception:  # noqa: BLE001 - any failure means the property needs a built robot
        return None


def _listed(names: tuple[str, ...] | None) -> list[str] | None:
    return None if names is None else list(names)


@cache
def camera_names(task_id: str, robot: str | None) -> tuple[str, ...] | None:
    """The sensors of a task with a robot: the `CameraConfig` uids in the task class's
    `_default_sensor_configs` and the agent class's `_sensor_configs`, read from their source
    (the properties build poses from the scene, so they cannot run without one). None where a
    uid is not a literal, a property extends its parent's, or nothing is found: unknown."""
    envs, agents = _registries()
    task = _literal_camera_uids(envs[task_id].cls, "_default_sensor_configs")
    if robot is None or robot not in agents:
        return None
    arm = _literal_camera_uids(agents[robot].agent_cls, "_sensor_configs")
    if task is None or arm is None or not task | arm:
        return None
    return tuple(sorted(task | arm))


def _literal_camera_uids(cls: type, prop: str) -> set[str] | None:
    owner = next(c for c in cls.__mro__ if prop in vars(c))
    fn = getattr(vars(owner)[prop], "fget", vars(owner)[prop])
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name == "super":
            return None
        if name == "CameraConfig":
            uid = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "uid"), None)
            if not (isinstance(uid, ast.Constant) and isinstance(uid.value, str)):
                return None
            found.add(uid.value)
    return found


def check_names(params: ManiSkillParams, key: str) -> None:
    """init_params' task id, robot, control mode and cameras against ManiSkill's registries;
    `key` is the section's init_params path (env.train.init_params)."""
    tasks = _known("tasks", params.id, 0, "cls")
    if params.id not in tasks:
        raise not_in_set(f"{key}.id", params.id, tasks, "a ManiSkill task")
    if params.robot_uids is not None:
        robots = _known("robots", params.robot_uids, 1, "agent_cls")
        if params.robot_uids not in robots:
            raise not_in_set(f"{key}.robot_uids", params.robot_uids, robots, "a ManiSkill robot")
    cache_ = _cache()
    robot = params.robot_uids or cache_.get(f"default_robot/{params.id}", lambda: default_robot(params.id))
    modes = cache_.get(f"control_modes/{robot}", lambda: list(control_modes(robot)))
    if params.control_mode not in modes:
        modes = list(control_modes(robot))  # the live answer decides a refusal
        if params.control_mode not in modes:
            raise not_in_set(f"{key}.control_mode", params.control_mode, modes, f"a control mode of {robot or 'any ManiSkill robot'}")
    cameras = cache_.get(f"cameras/{params.id}/{robot}", lambda: _listed(camera_names(params.id, robot)))
    if cameras is None:
        return
    if params.main_camera not in cameras:
        raise not_in_set(f"{key}.main_camera", params.main_camera, list(cameras), f"a camera of {params.id} with {robot}")
    wrist = [*WRIST_CHOICES, *(c for c in cameras if c != params.main_camera)]
    if params.wrist_camera not in wrist:
        raise not_in_set(f"{key}.wrist_camera", params.wrist_camera, wrist, f"a second camera of {params.id} with {robot}")
