"""Resolve a mixture section (`env.<mode>.tasks`) into one complete env config per task.

Order for each task (later wins): schema defaults < the env config its `config` names (with
its `base:` chain) < the keys the experiment and the overrides set on the section < the task
entry's own keys. The section's rollout-shaping keys (SECTION_KEYS) are then copied into every
task, so each task is a whole EnvConfig the env layer builds as it would a single section; an
entry that sets one of them to another value is an error, not a silent override.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embodied_rl.config.overrides import Override
from embodied_rl.config.schema.env import SECTION_KEYS, EnvConfig
from embodied_rl.config.typecheck import MISSING, defaults_tree
from embodied_rl.errors import ConfigError

MIXTURE_ENV_TYPE = "mixture"

#: (name or path, section) -> the env config's keys (the loader's find + read, bases merged)
ReadEnvConfig = Callable[[str, str], dict[str, Any]]
Merge = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def explicit_section_keys(raw: dict[str, Any], overrides: Sequence[Override], section: str) -> dict[str, Any]:
    """What the experiment YAML and the `env.<section>.*` overrides set on the section itself."""
    env = raw.get("env") if isinstance(raw.get("env"), dict) else {}
    out = copy.deepcopy(env.get(section) or {}) if isinstance(env.get(section), dict) else {}
    prefix = f"env.{section}."
    for ov in overrides:
        if not ov.key.startswith(prefix):
            continue
        parts = ov.key[len(prefix):].split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[parts[-1]] = copy.deepcopy(ov.value)
    out.pop("tasks", None)
    return out


def resolve_section(tree: dict[str, Any], section: str, explicit: dict[str, Any], picked: bool,
                    read_env_config: ReadEnvConfig, merge: Merge) -> None:
    """Fill `tree["env"][section]["tasks"]` with complete task configs, in place."""
    node = tree["env"][section]
    tasks = node.get("tasks")
    key = f"env.{section}"
    if not tasks:
        return
    if not isinstance(tasks, list):
        raise ConfigError(f"{key}.tasks: expected a list of tasks (each with config: <env config> and share: <weight>), got {tasks!r}")
    if picked:
        raise ConfigError(f"{key}: both an env config (defaults: or {key}=<name>) and tasks are given; "
                          f"a mixture names each task's env config in its own entry (tasks[i].config): drop one")
    if node.get("env_type") not in (MISSING, MIXTURE_ENV_TYPE):
        raise ConfigError(f"{key}.env_type={node.get('env_type')!r} beside tasks: each task names its simulator "
                          f"(tasks[i].config or tasks[i].env_type); remove {key}.env_type")
    node["env_type"] = MIXTURE_ENV_TYPE
    shared = {k: v for k, v in explicit.items() if k != "env_type"}
    node["tasks"] = [_resolve_task(entry, i, node, shared, key, read_env_config, merge) for i, entry in enumerate(tasks)]


def _resolve_task(entry: Any, i: int, node: dict[str, Any], shared: dict[str, Any], key: str,
                  read_env_config: ReadEnvConfig, merge: Merge) -> dict[str, Any]:
    path = f"{key}.tasks[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: expected a mapping like {{config: maniskill_pick_cube, share: 1}}, got {entry!r}")
    if entry.get("tasks"):
        raise ConfigError(f"{path}.tasks: a task cannot itself be a mixture; list its tasks in {key}.tasks")
    for name in SECTION_KEYS:
        if name in entry and entry[name] != node.get(name):
            raise ConfigError(f"{path}.{name}={entry[name]!r} differs from {key}.{name}={node.get(name)!r}: "
                              f"it shapes the whole rollout, so set it once on {key}")
    out = defaults_tree(EnvConfig())
    config = entry.get("config")
    if config is not None:
        if not isinstance(config, str) or not config:
            raise ConfigError(f"{path}.config: expected an env config name or path, got {config!r}")
        out = merge(out, read_env_config(config, f"{section_of(key)}.tasks[{i}]"))
    out = merge(merge(out, shared), entry)
    for name in SECTION_KEYS:
        out[name] = copy.deepcopy(node.get(name))
    out["tasks"] = []
    if out.get("env_type") == MISSING:
        raise ConfigError(f"{path}: no simulator: set {path}.config to an env config (available in env_configs/) or {path}.env_type")
    return out


def section_of(key: str) -> str:
    return key.removeprefix("env.")


def env_config_reader(find: Callable[[str, str, Sequence[Path]], Path], read: Callable[[Path, Sequence[Path]], dict[str, Any]],
                      dirs: Sequence[Path]) -> ReadEnvConfig:
    return lambda name, where: read(find(name, where, dirs), dirs)
