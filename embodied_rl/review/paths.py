"""Containment checks: the review page may only read regular files inside the given run dirs.

Everything goes through `resolve_inside`, which resolves symlinks and `..` first and checks
containment on the real path, so neither traversal strings nor symlinks can escape.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

# Files the page needs: videos, their sidecars, metrics and the resolved config. Checkpoints,
# event files and anything else in a run directory are never served.
SERVABLE_SUFFIXES = frozenset({".mp4", ".webm", ".json", ".jsonl", ".yaml"})
VIDEO_TYPES = {".mp4": "video/mp4", ".webm": "video/webm"}


class PathRefused(Exception):
    """The requested path is outside the run directory (or otherwise not allowed)."""


def resolve_inside(root: Path, relative: str) -> Path:
    """Real path of `root/relative` if it is an existing regular file inside `root`.

    `root` must already be a resolved real path. Raises PathRefused for absolute paths,
    NUL bytes, a real path outside `root` (via `..` or a symlink) or a suffix not servable;
    FileNotFoundError when the file does not exist.
    """
    if "\x00" in relative or "\\" in relative:
        raise PathRefused("invalid character in path")
    pure = PurePosixPath(relative)
    if pure.is_absolute() or relative.startswith("~"):
        raise PathRefused("absolute paths are refused")
    if any(part == ".." for part in pure.parts):
        raise PathRefused("'..' is refused")
    real = Path(os.path.realpath(root / pure))
    if not is_within(real, root):
        raise PathRefused("path resolves outside the run directory")
    if not real.exists():
        raise FileNotFoundError(relative)
    if not real.is_file():
        raise PathRefused("not a regular file")
    if real.suffix.lower() not in SERVABLE_SUFFIXES:
        raise PathRefused(f"files of type {real.suffix or '(none)'} are not served")
    return real


def is_within(path: Path, root: Path) -> bool:
    """True if the (already real) `path` equals `root` or lies below it."""
    return path == root or root in path.parents
