"""Helpers of tests/test_schema_walk.py: schema leaves, changed values, and section probes.

A *probe* runs one consumer of a config section for real and returns a fingerprint (nested
tuples, numpy arrays hashed) of what it observed; two configs whose fingerprints differ
behave differently. A probe that raises returns the exception as its outcome: a ConfigError
is a rejection, any other exception is an observable (if unfriendly) effect.
Not a test module (no test_ prefix); see test_schema_walk.py for the design.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
import torch
import yaml

from embodied_rl.config.loader import to_dict
from embodied_rl.config.schema import RootConfig
from embodied_rl.config.typecheck import field_types
from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError

# ----------------------------------------------------------------------------- leaves


@dataclass(frozen=True)
class Leaf:
    path: str
    tp: Any
    help: str
    sim: str | None = None  # env_type whose `init_params` holds this key


def _optional_inner(tp: Any) -> Any | None:
    """X for Optional[X] (X | None), else None."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def schema_leaves(cls: type, prefix: str, simulators: dict[str, type], sim: str | None = None) -> list[Leaf]:
    """Every leaf key below dataclass `cls`; `init_params` expand into every simulator's params_cls."""
    out: list[Leaf] = []
    for f in dataclasses.fields(cls):
        tp, path = field_types(cls)[f.name], f"{prefix}{f.name}"
        inner = _optional_inner(tp)
        if dataclasses.is_dataclass(tp):
            if hasattr(tp, "variant"):  # a polymorphic section (actor.model): the default type's keys
                tp = tp.variant({})
            out.extend(schema_leaves(tp, path + ".", simulators, sim))
            continue
        if f.name == "init_params":
            for name, params_cls in sorted(simulators.items()):
                out.extend(schema_leaves(params_cls, path + ".", simulators, name))
            continue
        out.append(Leaf(path, tp, f.metadata.get("help", ""), sim))
        if inner is not None and dataclasses.is_dataclass(inner):  # an optional section: its keys too
            out.extend(schema_leaves(inner, path + ".", simulators, sim))
    return out


def get_path(cfg: Any, path: str) -> Any:
    node = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


# ----------------------------------------------------------------------------- changed values

_CHOICE_FIRST = re.compile(r"([A-Za-z_][\w.-]*)\s*(\([^)]*\))?\s*$")
_CHOICE_NEXT = re.compile(r"^\s*([A-Za-z_][\w.-]*)")
_QUOTED = re.compile(r"'([^'\s]+)'")


def documented_choices(help_text: str) -> list[str]:
    """Values listed in a key's help as 'a | b | c' (the documented choices of a str key)."""
    first_sentence_parts = help_text.split(" | ")
    if len(first_sentence_parts) < 2:
        return []
    head = _CHOICE_FIRST.search(first_sentence_parts[0].split(":")[-1])
    out = [head.group(1)] if head else []
    out += [m.group(1) for p in first_sentence_parts[1:] if (m := _CHOICE_NEXT.match(p))]
    return [c.rstrip(".,;") for c in out]


def _scalar_candidates(tp: Any, value: Any, help_text: str) -> list[Any]:
    if tp is bool:
        return [not value]
    if typing.get_origin(tp) is Literal:
        # An invalid choice too: a one-choice Literal is live only by rejecting it.
        return [*typing.get_args(tp), f"{value}_walk"]
    if tp is int:
        v = int(value)
        return [v + 1, 2 * v if v else 2, v - 1, 0, -1]
    if tp is float:
        v = float(value)
        # Tiny first: it bites on deadlines and bounds; then x2 and /2 for coefficients.
        return [v * 1e-6, 2 * v, v / 2, 0.0, -1.0] if v else [0.5, 1.0, -1.0]
    if tp is str:
        return [*documented_choices(help_text), "", f"{value}_walk"]
    if tp is Any:
        return []
    raise TypeError(f"schema walk: no changed values for type {tp!r}")


def _sample(tp: Any, help_text: str) -> list[Any]:
    """Values of type `tp` for an Optional key that is currently null."""
    if dataclasses.is_dataclass(tp):
        return [to_plain(tp())]
    if tp is int:
        return [1, 2, 8, 0, -1]
    if tp is float:
        return [0.5, 2.0, 1.5, 1e-6]
    if tp is str:
        # a key naming an interpreter takes a real one: any other path is refused by its check
        interpreter = [sys.executable] if "Python interpreter" in help_text else []
        return [*documented_choices(help_text), *interpreter, "walk"]
    if typing.get_origin(tp) is list:
        item = typing.get_args(tp)[0]
        return [[0], [1]] if item is int else [[-0.5, 0.5]] if item is float else [["walk"]]
    return _scalar_candidates(tp, _zero(tp), help_text)


def _has_choices(tp: Any, help_text: str) -> bool:
    return typing.get_origin(tp) is Literal or (tp is str and len(documented_choices(help_text)) > 1)


def _zero(tp: Any) -> Any:
    return {bool: False, int: 0, float: 0.0, str: ""}.get(tp, typing.get_args(tp)[0] if typing.get_origin(tp) is Literal else None)


def candidates(leaf: Leaf, value: Any) -> list[Any]:
    """Changed values of `leaf` derived from its type (and documented choices), base value excluded."""
    tp, out = leaf.tp, []
    inner = _optional_inner(tp)
    if inner is not None:
        if value is None:
            out = _sample(inner, leaf.help)
        elif dataclasses.is_dataclass(inner):
            out = [None]  # an optional section: its own keys are leaves of the walk
        else:
            # A changed value before None: expensive probes see one value per context, and
            # switching a feature off can be invisible where it repeats a simulator's own limit
            # (action_adapter.clip [-1, 1] on ManiSkill's normalised controllers).
            changed = candidates(Leaf(leaf.path, inner, leaf.help), value)
            out = [*changed[:1], None, *changed[1:]]
    elif typing.get_origin(tp) is list and not value:
        out = _sample(tp, leaf.help)  # an empty list gets an item
    elif typing.get_origin(tp) is list:
        item = typing.get_args(tp)[0]
        value = list(value)
        firsts = _scalar_candidates(item, value[0], leaf.help) if value else []
        # Every choice of a Literal item or of documented str items (a list of sinks must reach
        # each sink), two of others.
        firsts = firsts if _has_choices(item, leaf.help) else firsts[:2]
        out = [[c, *value[1:]] for c in firsts] + [value[1:], value + value[-1:], []]
    elif typing.get_origin(tp) is dict or tp is dict:
        # Mappings: every documented example value ('...' in the help) for each entry.
        examples = _QUOTED.findall(leaf.help)
        out = [{k: ex for k in value} for ex in examples] + [{}]
    else:
        out = _scalar_candidates(tp, value, leaf.help)
    seen, uniq = [], []
    for c in out:
        if c != value and c not in seen and not (isinstance(c, float) and not np.isfinite(c)):
            seen.append(c)
            uniq.append(c)
    return uniq


def to_plain(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def override(path: str, value: Any, present: bool) -> str:
    """`key=value` (YAML value) as on the command line; `+key=value` adds a free-form key."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return f"{'' if present else '+'}{path}={text}"


# ----------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """A probe's result: a digest of what it observed, or the exception it raised."""

    digest: str
    summary: str
    rejected: bool = False
    error: bool = False

    @classmethod
    def of_error(cls, err: BaseException) -> Outcome:
        text = (str(err).strip().splitlines() or [""])[0][:300]
        return cls(digest=f"{type(err).__name__}: {text}", summary=f"{type(err).__name__}: {text}",
                   rejected=isinstance(err, ConfigError), error=True)


def digest(obj: Any) -> str:
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()[:16]


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu()
        h.update(str((obj.dtype, tuple(obj.shape))).encode())
        obj = obj.float().numpy() if obj.dtype in (torch.bfloat16, torch.float16) else obj.numpy()
    if isinstance(obj, np.ndarray):
        h.update(str((obj.dtype, obj.shape)).encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(repr(k).encode())
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(f"[{len(obj)}".encode())
        for x in obj:
            _feed(h, x)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        _feed(h, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    else:
        h.update(repr(obj).encode())


def run_probe(fn: Callable[[RootConfig, str], Any], cfg: RootConfig, leaf_path: str) -> Outcome:
    try:
        observed = fn(cfg, leaf_path)
    except Exception as err:  # noqa: BLE001 - a consumer's reaction is an outcome
        return Outcome.of_error(err)
    return Outcome(digest(observed), summary=_short(observed))


def _short(observed: Any) -> str:
    text = repr(observed) if not isinstance(observed, dict) else repr(sorted(observed)[:8])
    return text[:120]


# The Ray session the walk holds (see schema_walk_runtime_probes.ray_cluster): "key", the cluster
# settings it was started with, and "cluster", its RayCluster.
RAY_SESSION: dict[str, Any] = {}


def ray_state() -> tuple[bool, str | None]:
    """What config loading and planning read of Ray: whether a session runs here, and whose."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized(), RAY_SESSION.get("key")


def try_load(name: str, overrides: list[str]) -> RootConfig | Outcome:
    try:
        return load_config(name, overrides)
    except ConfigError as err:
        return Outcome.of_error(err)
    except Exception as err:  # noqa: BLE001 - the loader refused the value, if not in one line
        out = Outcome.of_error(err)
        return Outcome(out.digest, f"load_config raised {out.summary} (not a ConfigError)", rejected=True, error=True)


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


def files_under(root: Path) -> dict[str, str]:
    """Relative path -> content digest of every file below root (run dirs, videos)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()[:12]
    return out


def plain_config(cfg: RootConfig) -> dict:
    return to_dict(cfg)


def cpu_slots(cfg: RootConfig) -> int:
    """CPU worker slots as RayCluster counts them on a machine without GPUs."""
    return (cfg.cluster.num_cpu_slots or os.cpu_count() or 1) * cfg.cluster.num_nodes


# ----------------------------------------------------------------------------- contexts

def is_switch(leaf: Leaf) -> bool:
    """Keys that select behaviour (flags, choices, optional features): the contexts other keys may need."""
    tp = leaf.tp
    return (tp is bool or _has_choices(tp, leaf.help) or _optional_inner(tp) is not None
            or (typing.get_origin(tp) is list and _has_choices(typing.get_args(tp)[0], leaf.help)))


def tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", text.lower()) if len(t) > 2}


def relatedness(key: Leaf, switch: Leaf, value: Any) -> int:
    """How strongly a switch setting is tied to a key by name, value and help (for ordering only)."""
    mine = name_tokens(key) | tokens(key.help)
    theirs = name_tokens(switch) | tokens(str(value))
    return len(mine & theirs) + 3 * len(name_tokens(key) & theirs)


def name_tokens(leaf: Leaf) -> set[str]:
    """Words of the key's last path part (lora_rank: {lora, rank})."""
    return tokens(leaf.path.rsplit(".", 1)[-1])


def shares_name(key: Leaf, switch: Leaf) -> bool:
    """The switch's name and the key's share a word (is_lora and lora_rank): likely its gate."""
    return bool(name_tokens(key) & name_tokens(switch))
