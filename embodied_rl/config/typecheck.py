"""Turn plain (resolved) YAML data into schema dataclasses, with one-line errors naming the key.

Why not OmegaConf structured configs: they cannot express `Literal` choices, report keys
relative to the failing node, and give no "did you mean" hint. This walker supports the
type forms the schema uses: dataclasses, int, float, bool, str, Any, Optional/Union,
Literal, list[X] and dict[str, X].
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from functools import cache, lru_cache
from typing import Any, Literal, Union

from embodied_rl.errors import ConfigError

MISSING = "???"


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Resolved type hints of a dataclass's fields (annotations are strings under PEP 563)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def type_name(tp: Any) -> str:
    """Human-readable type for messages and docs: 'int', 'int or null', "one of 'a', 'b'"."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    if origin is dict:
        key, value = typing.get_args(tp)
        return f"dict[{type_name(key)}, {type_name(value)}]"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def is_free_form(tp: Any) -> bool:
    """A dict[str, X] field: users may add keys to it (with `+key=value`)."""
    return tp is dict or typing.get_origin(tp) is dict


def section_type(tp: type, data: Any) -> type:
    """The dataclass to build for a section of type `tp` holding `data`: `tp` itself, or for a
    polymorphic section (a class with a `variant(data)` classmethod) the subclass its data names."""
    variant = getattr(tp, "variant", None)
    return variant(data if isinstance(data, dict) else {}) if variant is not None else tp


def defaults_tree(obj: Any) -> dict[str, Any]:
    """Schema defaults of dataclass `obj` as plain dicts. A polymorphic section holds only its
    base class's keys; the subclass its data names fills in its own defaults when built."""
    base = next((c for c in type(obj).__mro__ if "variant" in vars(c)), type(obj))
    out = {}
    for f in dataclasses.fields(base):
        value = getattr(obj, f.name)
        out[f.name] = defaults_tree(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
    return out


def schema_paths(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of a dataclass schema, sections included (for suggestions and docs)."""
    out = []
    for name, tp in field_types(cls).items():
        out.append(join(prefix, name))
        if dataclasses.is_dataclass(tp):
            out.extend(schema_paths(section_type(tp, {}), join(prefix, name)))
    return out


@lru_cache(maxsize=1)
def _root_paths() -> tuple[str, ...]:
    from embodied_rl.config.schema import RootConfig

    return tuple(schema_paths(RootConfig))


#: Keys that existed once -> what replaced them (an old config gets the way forward, not a guess).
REPLACED_KEYS = {
    "algorithm.sampling_params.do_sample_eval": "every evaluation now scores greedy and sampled side by side; "
    "choose them with algorithm.sampling_params.eval_scoring (e.g. [greedy] or [sampled, greedy])",
    # Sampling knobs of a discretising policy belong to its model config.
    "algorithm.sampling_params.top_k": "it moved to actor.model.top_k (a setting of the policy, not of the algorithm)",
    "algorithm.sampling_params.logprobs_over": "it moved to actor.model.logprobs_over (a setting of the policy, not of the algorithm)",
}


def not_in_set(key: str, value: object, valid: list[str], what: str, most: int = 12) -> ConfigError:
    """One line for a value outside a closed set (a registry's names): the closest name when
    one is close, else the set itself (its first `most` names: a registry may hold dozens)."""
    close = difflib.get_close_matches(str(value), valid, n=1, cutoff=0.6)
    shown = ", ".join(valid[:most]) + (f", ... ({len(valid)} in all)" if len(valid) > most else "")
    hint = f"did you mean {key}={close[0]}? (valid: {shown})" if close else f"valid: {shown}"
    return ConfigError(f"{key}={value!r} is not {what}; {hint}")


def unknown_key_error(path: str, key: str, valid: list[str], hint: str = "") -> ConfigError:
    full = join(path, key)
    if full in REPLACED_KEYS:
        return ConfigError(f"unknown key '{full}': {REPLACED_KEYS[full]}")
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return ConfigError(f"unknown key '{full}'; did you mean '{join(path, close[0])}'?{hint}")
    elsewhere = [p for p in _root_paths() if p.rsplit(".", 1)[-1] == key and p != full]
    if elsewhere:  # right name, wrong section (e.g. algorithm.max_steps)
        return ConfigError(f"unknown key '{full}'; did you mean '{elsewhere[0]}'?{hint}")
    where = f"'{path}'" if path else "the top level"
    return ConfigError(f"unknown key '{full}'; valid keys in {where}: {', '.join(valid)}{hint}")


def _wrong(path: str, tp: Any, value: Any) -> ConfigError:
    shown = "null" if value is None else repr(value)
    return ConfigError(f"{path}: expected {type_name(tp)}, got {shown}")


def convert(tp: Any, value: Any, path: str) -> Any:
    """Check `value` against type `tp` and return it converted (dataclass sections built)."""
    if isinstance(value, str) and value == MISSING:
        raise ConfigError(f"{path}: missing required value (???); set it with {path}=<value>")
    if tp in (dict, list):  # bare annotations mean "any items"
        tp = dict[str, Any] if tp is dict else list[Any]
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise _wrong(path, tp, value)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(arg, value, path)
            except ConfigError:
                continue
        raise _wrong(path, tp, value)
    if origin is Literal:
        for choice in typing.get_args(tp):
            if value == choice and type(value) is type(choice):
                return value
        raise _wrong(path, tp, value)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise _wrong(path, tp, value)
        (item,) = typing.get_args(tp)
        return [convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(path, tp, value)
        _, item = typing.get_args(tp)
        return {str(k): convert(item, v, join(path, str(k))) for k, v in value.items()}
    return _convert_scalar(tp, value, path)


def _convert_scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # e.g. placement `env: 0`, a numeric experiment name
    else:
        raise TypeError(f"schema type {tp!r} at {path} is not supported by the config loader")
    raise _wrong(path, tp, value)


def build(cls: type, data: Any, path: str) -> Any:
    """Build dataclass `cls` from a mapping; unknown keys, wrong types and ??? raise ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a section (mapping), got {data!r}")
    cls = section_type(cls, data)
    types_ = field_types(cls)
    for key in data:
        if key not in types_:
            raise unknown_key_error(path, str(key), list(types_))
    kwargs = {name: convert(tp, data[name], join(path, name)) for name, tp in types_.items() if name in data}
    for f in dataclasses.fields(cls):
        if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{join(path, f.name)}: missing required value; set it with {join(path, f.name)}=<value>")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # a section's own __post_init__ check
        raise ConfigError(f"{path or 'config'}: {err}") from err
