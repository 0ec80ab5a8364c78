"""Load an experiment config: YAML file + env configs + CLI overrides -> validated RootConfig.

Order (later wins): schema defaults < env configs picked by `defaults:` (or `env.train=<name>`),
each on top of the env config its `base:` names < the experiment YAML < `key=value` overrides.
Interpolations (`${runner.seed}`) are resolved on the merged tree, then every key is checked
against the schema, and the cross-key rules run (each simulator's init_params among them).
Callers use `embodied_rl.configure.load_config`, which passes every subsystem's rules.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embodied_rl.config.mixtures import (
    env_config_reader,
    explicit_section_keys,
    resolve_section,
)
from embodied_rl.config.overrides import apply_override, parse_override
from embodied_rl.config.plan import plan_run
from embodied_rl.config.rules import RuleSet, run_checks, run_plan_checks
from embodied_rl.config.schema import RootConfig
from embodied_rl.config.typecheck import MISSING, build, defaults_tree
from embodied_rl.distributed.resources import Resources, detect_resources
from embodied_rl.errors import ConfigError
from embodied_rl.plugins import load_plugins

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "configs"
ENV_CONFIG_DIR = REPO_ROOT / "env_configs"
DEFAULT_EXPERIMENT = "maniskill_ppo_from_sft"
ENV_SECTIONS = ("train", "eval")
_DEFAULTS_ENTRY = re.compile(r"^env/(?P<name>[\w.-]+)@env\.(?P<section>train|eval)$")


def _repo_path(relative: str) -> str:
    """`${repo:models/x}`: a path inside this checkout, so shipped configs find shipped files
    (checkpoints in models/) from any working directory; other paths stay relative to it."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ValueError(f"${{repo:{relative}}} takes a path inside the checkout, like models/<name>")
    return str(REPO_ROOT / relative)


OmegaConf.register_new_resolver("repo", _repo_path, replace=True)


def available(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


def find_experiment(name_or_path: str) -> Path:
    """A name from configs/ (`maniskill_ppo_tiny`) or a path to a YAML file."""
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {name_or_path}")
        return path
    path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        names = ", ".join(available(CONFIG_DIR)) or "(none)"
        raise ConfigError(f"unknown experiment config '{name_or_path}'; available in {CONFIG_DIR}: {names}")
    return path


def env_config_dirs(experiment: Path) -> list[Path]:
    """`env_configs/` next to the experiment's folder (user projects), then the repo's."""
    dirs = [experiment.resolve().parent.parent / "env_configs", ENV_CONFIG_DIR]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def _is_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or os.sep in name


def find_env_config(name: str, section: str, dirs: Sequence[Path]) -> Path:
    """A name in env_configs/ (`maniskill_pick_cube`) or a path to a YAML file (`my/task.yaml`)."""
    if _is_path(name):
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"env.{section}: env config file not found: {name} (a path is relative to the working directory)")
        return path
    found = _named(name, dirs)
    if found is None:
        raise ConfigError(f"env.{section}: unknown env config '{name}'; available: {_names(dirs)} "
                          f"(in {', '.join(str(d) for d in dirs) or ENV_CONFIG_DIR})")
    return found


def _named(name: str, dirs: Sequence[Path]) -> Path | None:
    return next((d / f"{name}.yaml" for d in dirs if (d / f"{name}.yaml").is_file()), None)


def _names(dirs: Sequence[Path]) -> str:
    return ", ".join(sorted({n for d in dirs for n in available(d)})) or "(none)"


def read_env_config(path: Path, dirs: Sequence[Path] = (ENV_CONFIG_DIR,), _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """An env config file's keys, on top of the env config its `base:` names, if any.

    `base: <name>` (looked up next to the file, then in `dirs`) or `base: <path>.yaml` (relative
    to the file) lets a variant, e.g. a distribution shift of a task, state only what it
    changes; bases may have bases. Mappings merge key by key, lists are replaced (deep_merge).
    """
    data = read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base must name an env config (e.g. base: maniskill_push_cube), got {base!r}")
    if _is_path(base):
        base_path = path.parent / base
        if not base_path.is_file():
            raise ConfigError(f"{path}: base: {base} not found (a path is relative to {path.parent})")
    else:
        lookup = list(dict.fromkeys([path.parent, *dirs]))
        base_path = _named(base, lookup)
        if base_path is None:
            raise ConfigError(f"{path}: base: unknown env config '{base}'; available: {_names(lookup)}")
    chain = (*_chain, path.resolve())
    if base_path.resolve() in chain:
        raise ConfigError(f"{path}: base: {base} makes a cycle ({' -> '.join(p.stem for p in (*chain, base_path))}); remove one base")
    return deep_merge(read_env_config(base_path, dirs, chain), data)


def read_yaml(path: Path) -> dict[str, Any]:
    """The file's mapping, a copy the caller may change. Parsing through OmegaConf costs ~3 ms a
    file, so a process that loads configs many times (the schema walk, a sweep) parses each
    distinct file content once."""
    text = Path(path).read_bytes()
    if text not in _PARSED:
        _PARSED[text] = _parse_yaml(text, path)
    return copy.deepcopy(_PARSED[text])


_PARSED: dict[bytes, dict[str, Any]] = {}


def _parse_yaml(text: bytes, path: Path) -> dict[str, Any]:
    try:
        data = OmegaConf.to_container(OmegaConf.create(text.decode("utf-8")), resolve=False) if text.strip() else None
    except (OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: invalid YAML: {str(err).splitlines()[0]}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; everything else (lists included) is replaced."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def replace_paths(node: Any, prefix: str = "") -> list[tuple[str, ...]]:
    """Paths of schema fields marked `metadata={"merge": "replace"}`: a value set by a config
    replaces the default instead of merging into it (e.g. a placement is one partition)."""
    out: list[tuple[str, ...]] = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if f.metadata.get("merge") == "replace":
            out.append((*prefix, f.name))
        elif dataclasses.is_dataclass(value):
            out.extend(replace_paths(value, (*prefix, f.name)))
    return out


def _drop_replaced(tree: dict[str, Any], update: dict[str, Any]) -> None:
    for path in replace_paths(RootConfig()):
        base, upd = tree, update
        for key in path[:-1]:
            base, upd = base.get(key), upd.get(key) if isinstance(upd, dict) else None
            if not isinstance(base, dict) or not isinstance(upd, dict):
                break
        else:
            if path[-1] in upd and isinstance(base, dict):
                base.pop(path[-1], None)


def _parse_defaults(defaults: Any, path: Path) -> dict[str, str]:
    if not isinstance(defaults, list):
        raise ConfigError(f"{path}: 'defaults' must be a list like [env/<name>@env.train, env/<name>@env.eval]")
    picks: dict[str, str] = {}
    for entry in defaults:
        match = _DEFAULTS_ENTRY.match(str(entry)) if entry != "_self_" else None
        if entry == "_self_":
            continue  # Hydra's marker; this loader always applies the file after its defaults
        if match is None:
            raise ConfigError(f"{path}: defaults entry '{entry}' not understood; expected env/<name>@env.train or env/<name>@env.eval")
        picks[match["section"]] = match["name"]
    return picks


def compose(name_or_path: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The merged, unresolved config tree (plain dicts)."""
    experiment = find_experiment(name_or_path)
    raw = read_yaml(experiment)
    picks = _parse_defaults(raw.pop("defaults", []), experiment)
    env_raw = raw.get("env")
    if isinstance(env_raw, dict):  # `env: {train: <name>}` in the YAML also picks by name
        for section in ENV_SECTIONS:
            if isinstance(env_raw.get(section), str):
                picks[section] = env_raw.pop(section)
    parsed = [parse_override(o) for o in overrides]
    for ov in parsed:
        if ov.key in ("env.train", "env.eval") and isinstance(ov.value, str):
            picks[ov.key.split(".")[1]] = ov.value

    tree = defaults_tree(RootConfig())
    dirs = env_config_dirs(experiment)
    for section, name in picks.items():
        env_yaml = read_env_config(find_env_config(name, section, dirs), dirs)
        tree["env"][section] = deep_merge(tree["env"][section], env_yaml)  # the section's schema defaults
    _drop_replaced(tree, raw)
    tree = deep_merge(tree, raw)
    for ov in parsed:
        if ov.key in ("env.train", "env.eval") and isinstance(ov.value, str):
            continue
        apply_override(tree, ov)
    reader = env_config_reader(find_env_config, read_env_config, dirs)
    for section in ENV_SECTIONS:
        resolve_section(tree, section, explicit_section_keys(raw, parsed, section), section in picks, reader, deep_merge)
    return tree


def _first_missing(node: Any, path: str = "") -> str | None:
    if isinstance(node, dict):
        for key, value in node.items():
            found = _first_missing(value, f"{path}.{key}" if path else str(key))
            if found:
                return found
    return path if node == MISSING else None


def resolve(tree: dict[str, Any]) -> dict[str, Any]:
    """Resolve `${...}` interpolations; errors name the key that holds the interpolation.

    Required (???) values are reported first, by their own key rather than by the key whose
    interpolation happens to reach them.
    """
    _check_env_picked(tree)
    missing = _first_missing(tree)
    if missing:
        raise ConfigError(f"{missing}: missing required value (???); set it with {missing}=<value>")
    try:
        return OmegaConf.to_container(OmegaConf.create(tree), resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{key}: {msg}") from err


def validate(data: dict[str, Any], rule_sets: Sequence[RuleSet], resources: Resources | None = None, *,
             plan: bool = True, skip: Collection[str] = ()) -> RootConfig:
    """Check a resolved tree against the schema and the cross-key rules of `rule_sets` (all of
    them: `embodied_rl.configure.RULE_SETS`, which callers get through `configure.load_config`).

    With `plan` (the default), the sizes left null for derivation are filled from `resources`
    (default: the slots Ray will have, see distributed/resources.py) and the rules that need the
    machine run too; `plan=False` is for reading a config on another machine (e.g. export).
    `skip` names rules (a `checks.py` of a subsystem) a command does not depend on, e.g. `embodied-rl demos`
    records the very demos the `sft_data` rule looks for."""
    load_plugins(data.get("plugins") or [])  # their names must pass the schema and the rules
    cfg = build(RootConfig, data, "")
    run_checks(rule_sets, cfg, skip)
    if plan:
        run_plan = plan_run(cfg, resources or detect_resources(cfg.cluster))
        run_plan_checks(rule_sets, cfg, run_plan, skip)
    return cfg


def _check_env_picked(data: dict[str, Any]) -> None:
    env = data.get("env")
    for section in ENV_SECTIONS:
        if isinstance(env, dict) and isinstance(env.get(section), dict) and env[section].get("env_type") == MISSING:
            names = ", ".join(available(ENV_CONFIG_DIR)) or "(none)"
            raise ConfigError(
                f"env.{section}: no env config chosen; add env/<name>@env.{section} to 'defaults' "
                f"or pass env.{section}=<name> (available: {names})"
            )


def to_dict(cfg: RootConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: RootConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)


def save_resolved_config(cfg: RootConfig, run_dir: str | os.PathLike[str]) -> Path:
    """Write `<run_dir>/config.yaml` (fully resolved; loadable with load_config(path))."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(to_yaml(cfg))
    tmp.replace(path)  # atomic: a crash never leaves a half-written config
    return path


__all__ = [
    "compose",
    "find_experiment",
    "read_env_config",
    "resolve",
    "save_resolved_config",
    "to_dict",
    "to_yaml",
    "validate",
]
