"""Command-line overrides: `key=value` sets an existing key, `+key=value` adds one to a free-form dict.

Values are parsed as YAML (like Hydra): `3` is an int, `true` a bool, `[1, 2]` a list,
`null` None, anything else a string. Keys are checked against the schema while walking so a
typo fails here with a suggestion instead of being merged silently.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Union

import yaml

from embodied_rl.config.schema import RootConfig
from embodied_rl.config.typecheck import (
    field_types,
    is_free_form,
    section_type,
    unknown_key_error,
)
from embodied_rl.errors import ConfigError

_KEY = re.compile(r"^[A-Za-z_][\w-]*(\.[A-Za-z_0-9][\w-]*)*$")


@dataclass
class Override:
    key: str  # dotted path, e.g. runner.max_steps
    value: Any  # YAML-parsed value
    add: bool  # written as +key=value
    text: str  # as the user typed it (for messages)


def parse_override(text: str) -> Override:
    add = text.startswith("+")
    body = text[1:] if add else text
    if "=" not in body:
        raise ConfigError(f"override '{text}' must look like key=value (or +key=value to add a key)")
    key, raw = body.split("=", 1)
    key = key.strip()
    if not _KEY.match(key):
        raise ConfigError(f"override '{text}': '{key}' is not a dotted key like runner.max_steps")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        hint = _QUOTE_HINT.format(key=key) if raw.lstrip().startswith("{") else ""
        raise ConfigError(f"override '{text}': value is not valid YAML ({str(err).splitlines()[0]}){hint}") from err
    return Override(key=key, value=value, add=add, text=text)


# The shell splits an unquoted mapping at spaces and brace-expands it at commas.
_QUOTE_HINT = "; quote the whole override so the shell keeps it in one piece: '{key}={{\"actor,env,rollout\": 0-1}}'"



def _child_type(tp: Any, key: str) -> Any:
    """Schema type of `key` inside a node of type `tp` (Any below free-form nodes); key "": `tp`
    itself without an Optional."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        non_none = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = non_none[0] if len(non_none) == 1 else Any
    if not key:
        return tp
    if dataclasses.is_dataclass(tp):
        return field_types(tp).get(key, Any)
    if typing.get_origin(tp) is dict:
        return typing.get_args(tp)[1]
    return Any


def _is_fixed(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp)


def apply_override(tree: dict[str, Any], ov: Override) -> None:
    """Set `ov.key` in the composed tree in place; raises ConfigError naming the key."""
    parts = ov.key.split(".")
    node: Any = tree
    tp: Any = RootConfig
    path = ""
    for part in parts[:-1]:
        if part not in node:
            if ov.add and not _is_fixed(tp):
                node[part] = {}  # `+a.b.c=1` inside a free-form section creates a.b
            else:
                _missing(node, tp, path, part, ov)
        parent, node, tp = node, node[part], _child_type(tp, part)
        path = f"{path}.{part}" if path else part
        tp = _child_type(tp, "")
        if node is None and _is_fixed(tp):  # a null optional section (env.train.server): from its defaults
            node = parent[part] = {}
        if not isinstance(node, dict):
            raise ConfigError(f"override '{ov.text}': '{path}' is a value, not a section")
        if dataclasses.is_dataclass(tp):
            tp = section_type(tp, node)
    last = parts[-1]
    if ov.add:
        if _is_fixed(tp):
            if last in node or last in field_types(tp):
                raise ConfigError(f"override '{ov.text}': '{ov.key}' is a key of its section; drop the '+' to set it")
            raise unknown_key_error(path, last, list(node), hint=" ('+' only adds keys to free-form sections such as env.train.init_params)")
        node[last] = ov.value
        return
    if last not in node and not (_is_fixed(tp) and last in field_types(tp)):  # a subclass's key not yet in the tree
        _missing(node, tp, path, last, ov)
    if isinstance(node.get(last), dict) and not isinstance(ov.value, dict) and typing.get_origin(_child_type(tp, last)) is dict:
        raise ConfigError(f"override '{ov.text}': {ov.key} takes a mapping, got {ov.value!r}{_QUOTE_HINT.format(key=ov.key)}")
    node[last] = ov.value


def _missing(node: dict[str, Any], tp: Any, path: str, key: str, ov: Override) -> None:
    full = f"{path}.{key}" if path else key
    if not _is_fixed(tp) and (is_free_form(tp) or tp is Any):
        raise ConfigError(f"'{full}' is not set; add it with '+{ov.text.lstrip('+')}'")
    raise unknown_key_error(path, key, list(field_types(tp)) if _is_fixed(tp) else list(node))
