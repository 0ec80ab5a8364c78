"""Read and validate the JSON sidecar the env recorder writes next to every rollout video.

The schema (version 2) is produced by `embodied_rl/envs/video.py`. A sidecar that is missing,
unreadable or partly invalid never stops the review page: every problem becomes a warning
string shown next to that video, and whatever could be validated is still used.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_type_hints

SCHEMA_VERSION = 2
#: Keys renamed since version 1, read under their new name from older sidecars.
_V1_KEYS = {"checkpoint_step": "policy_version"}
MODES = ("train", "eval")

_GRID_FIELDS = ("rows", "cols", "tile_height", "tile_width", "num_envs")
#: The sidecar's key where it differs from the attribute name.
_JSON_KEYS = {"episode_return": "return"}


@dataclass
class Episode:
    """One episode inside a tiled video. Frames [frame_start, frame_end) of tile `env_index`.

    The fields up to `failed` are read from the sidecar (None where it lacked a valid value); the
    rest are derived here."""

    env_index: int | None = None
    task_id: str | None = None
    instruction: str | None = None
    reset_id: int | None = None
    episode_return: float | None = None
    success: bool | None = None
    success_once: bool | None = None
    success_at_end: bool | None = None
    length: int | None = None
    frame_start: int | None = None
    frame_end: int | None = None
    failed: bool = False  # the simulator process crashed during this episode
    finished: bool = True  # False: still running when the video ended (outcome not final)
    # Unfinished and cut before its first action: an auto-reset at the rollout's last chunk
    # boundary started it, so the video holds only its first frame. Hidden by default on the page.
    stub: bool = False
    seekable: bool = False  # frame range valid: the page may jump to it
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["return"] = d.pop("episode_return")
        return d


@dataclass
class Sidecar:
    """Validated content of one sidecar; the fields up to `num_frames` are read from the file's
    top level (None where it lacked a valid value). `policy_version`: the training steps behind
    the weights that acted (0 = the starting policy)."""

    run_name: str | None = None
    mode: str | None = None
    global_step: int | None = None
    policy_version: int | None = None
    env_worker: int | None = None
    stage: int | None = None
    simulator: str | None = None
    video: str | None = None
    fps: float | None = None
    num_frames: int | None = None
    grid: dict[str, int] | None = None
    episodes: list[Episode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _json_spec(cls: type, last: str) -> dict[str, tuple[type, ...]]:
    """sidecar key -> accepted JSON types, for the fields of `cls` up to `last`, from their
    annotations. bool is never numeric (True is an int), and a float field accepts an int."""
    accepted = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}
    spec, hints = {}, get_type_hints(cls)
    for f in fields(cls):
        tp = hints[f.name]
        base = next(t for t in get_args(tp) if t is not type(None)) if get_args(tp) else tp
        spec[_JSON_KEYS.get(f.name, f.name)] = accepted[base]
        if f.name == last:
            return spec
    raise ValueError(f"{cls.__name__} has no field {last}")


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def _take(src: dict, spec: dict[str, tuple[type, ...]], where: str, warnings: list[str]) -> dict:
    """Copy the keys of `spec` whose values have the right type; warn about the others."""
    out: dict[str, Any] = {}
    for key, types in spec.items():
        if key not in src:
            warnings.append(f"{where}: missing key '{key}'")
        elif not _typed(src[key], types):
            names = "/".join(t.__name__ for t in types)
            warnings.append(f"{where}: '{key}' should be {names}, got {src[key]!r:.40}")
        else:
            out[key] = src[key]
    return out


_VIDEO_SPEC = _json_spec(Sidecar, "num_frames")
_EPISODE_SPEC = _json_spec(Episode, "failed")


def _parse_grid(raw: Any, warnings: list[str]) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        warnings.append("sidecar: 'grid' missing or not an object; tile highlighting disabled")
        return None
    grid = _take(raw, {k: (int,) for k in _GRID_FIELDS}, "grid", warnings)
    if len(grid) != len(_GRID_FIELDS) or min(grid.values()) <= 0:
        warnings.append("grid: needs positive rows, cols, tile_height, tile_width, num_envs")
        return None
    if grid["num_envs"] > grid["rows"] * grid["cols"]:
        warnings.append(f"grid: num_envs {grid['num_envs']} does not fit {grid['rows']}x{grid['cols']}")
        return None
    return grid


def _is_stub(ep: Episode) -> bool:
    """No env step taken (length 0), or a single frame (older recorders counted frames)."""
    if ep.finished:
        return False
    one_frame = ep.frame_start is not None and ep.frame_end is not None and ep.frame_end - ep.frame_start == 1
    return ep.length == 0 or one_frame


def _parse_episode(i: int, raw: Any, side: Sidecar) -> Episode | None:
    where = f"episodes[{i}]"
    if not isinstance(raw, dict):
        side.warnings.append(f"{where}: not an object (skipped)")
        return None
    warns: list[str] = []
    vals = _take(raw, _EPISODE_SPEC, where, warns)
    ep = Episode(**{("episode_return" if k == "return" else k): v for k, v in vals.items()})
    ep.failed = bool(vals.get("failed", False))
    # Optional: the recorder marks episodes cut off by the end of the video.
    if "finished" in raw:
        if isinstance(raw["finished"], bool):
            ep.finished = raw["finished"]
        else:
            warns.append(f"{where}: 'finished' should be bool, got {raw['finished']!r:.40}")
    start, end = ep.frame_start, ep.frame_end
    if start is not None and end is not None:
        if not 0 <= start < end:
            warns.append(f"{where}: frame range [{start}, {end}) is empty or negative")
        elif side.num_frames is not None and end > side.num_frames:
            warns.append(f"{where}: frame_end {end} beyond num_frames {side.num_frames}")
        else:
            ep.seekable = side.fps is not None
    ep.stub = _is_stub(ep)
    if ep.env_index is not None and side.grid and not 0 <= ep.env_index < side.grid["num_envs"]:
        warns.append(f"{where}: env_index {ep.env_index} outside grid of {side.grid['num_envs']} envs")
        ep.env_index = None
    ep.warnings = warns
    return ep


def parse_sidecar(data: Any) -> Sidecar:
    """Validate decoded sidecar JSON. Never raises: problems land in `.warnings`."""
    side = Sidecar()
    if not isinstance(data, dict):
        side.warnings.append("sidecar: top level is not a JSON object")
        return side
    version = data.get("schema_version")
    if version == 1:
        data = {_V1_KEYS.get(k, k): v for k, v in data.items()}
    elif version != SCHEMA_VERSION:
        side.warnings.append(
            f"sidecar: schema_version {version!r} is not {SCHEMA_VERSION}; "
            "fields were read on a best-effort basis (use a matching embodied_rl version)")
    for key, value in _take(data, _VIDEO_SPEC, "sidecar", side.warnings).items():
        setattr(side, key, value)
    if side.mode is not None and side.mode not in MODES:
        side.warnings.append(f"sidecar: mode {side.mode!r} is not one of {MODES}")
        side.mode = None
    if side.fps is not None and side.fps <= 0:
        side.warnings.append(f"sidecar: fps {side.fps} must be positive")
        side.fps = None
    side.grid = _parse_grid(data.get("grid"), side.warnings)
    raw_eps = data.get("episodes")
    if not isinstance(raw_eps, list):
        side.warnings.append("sidecar: 'episodes' missing or not a list")
        raw_eps = []
    for i, raw in enumerate(raw_eps):
        ep = _parse_episode(i, raw, side)
        if ep is not None:
            side.episodes.append(ep)
    return side


def load_sidecar(path: Path) -> Sidecar:
    """Read `path`; a missing or corrupt file gives an empty Sidecar with one warning."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Sidecar(warnings=[(
            f"sidecar {path.name} is missing (still recording, or the recorder stopped early): "
            "video listed without episode data")])
    except (OSError, UnicodeDecodeError) as exc:
        return Sidecar(warnings=[f"sidecar {path.name} is unreadable ({exc.__class__.__name__})"])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Sidecar(warnings=[(
            f"sidecar {path.name} is corrupt JSON (line {exc.lineno}: {exc.msg}); "
            "video listed without episode data")])
    return parse_sidecar(data)
