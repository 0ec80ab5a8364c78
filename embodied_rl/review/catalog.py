"""Scan run directories into the catalog the review page renders (one JSON document).

Layout read (written by the env recorder and the runtime):
    <run>/config.yaml, <run>/metrics.jsonl, <run>/health.jsonl, <run>/checkpoints/best/best.json,
    <run>/video/{train,eval}/step_<global_step:06d>/<tag>.{mp4,webm} + <tag>.json (sidecar)
The same catalog feeds the live server (`/api/catalog`) and the static export; only the
`url_for` callback that turns a run-relative path into a link differs.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rl.errors import UserError
from embodied_rl.review.health import read_health
from embodied_rl.review.metrics import read_metrics
from embodied_rl.review.paths import VIDEO_TYPES, is_within
from embodied_rl.review.sidecar import MODES, load_sidecar

CATALOG_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_RUN_MARKERS = ("video", "metrics.jsonl", "config.yaml")

UrlFor = Callable[["Run", str], str]  # (run, run-relative posix path) -> link


@dataclass(frozen=True)
class Run:
    """A run directory given on the command line. `root` is its resolved real path."""

    id: str
    name: str
    root: Path


def _is_run(path: Path) -> bool:
    return any((path / marker).exists() for marker in _RUN_MARKERS)


def discover_runs(paths: list[str]) -> list[Run]:
    """Resolve the RUN_DIR arguments. A directory of runs (e.g. `runs/`) expands to its runs."""
    roots: list[Path] = []
    for arg in paths:
        path = Path(arg).expanduser()
        if not path.exists():
            raise UserError(f"run directory '{arg}' does not exist; pass a run such as runs/<experiment_name>")
        if not path.is_dir():
            raise UserError(f"'{arg}' is not a directory; pass a run directory such as runs/<experiment_name>")
        root = path.resolve()
        if _is_run(root):
            found = [root]
        else:
            found = sorted(c.resolve() for c in root.iterdir() if c.is_dir() and _is_run(c))
        if not found:
            raise UserError(
                f"'{arg}' is not a run directory (no video/, metrics.jsonl or config.yaml in it or "
                "its subdirectories); pass a run such as runs/<experiment_name>")
        roots.extend(r for r in found if r not in roots)
    names = _short_names(roots)
    return [Run(id=str(i), root=r, name=n) for i, (r, n) in enumerate(zip(roots, names))]


def _short_names(roots: list[Path]) -> list[str]:
    """Each run's folder name, lengthened with parent folders until the names are unique."""
    depth = 1
    while True:
        names = ["/".join(r.parts[-depth:]) for r in roots]
        if len(set(names)) == len(names) or depth >= max(len(r.parts) for r in roots):
            return names
        depth += 1


def _video_entry(run: Run, rel_dir: str, mode: str, step: int, stem: str,
                 files: list[Path], url_for: UrlFor) -> dict[str, Any]:
    """Merge one `<stem>.{mp4,webm,json}` group into a catalog video entry."""
    videos = [f for f in files if f.suffix.lower() in VIDEO_TYPES]
    sidecar_path = next((f for f in files if f.suffix.lower() == ".json"), None)
    side = load_sidecar(sidecar_path or Path(f"{stem}.json"))
    warnings = list(side.warnings)
    if side.mode is not None and side.mode != mode:
        warnings.append(f"sidecar says mode '{side.mode}' but the video is under video/{mode}/ (listed as {side.mode})")
    if side.global_step is not None and side.global_step != step:
        warnings.append(f"sidecar says global_step {side.global_step} but the folder is step_{step:06d} "
                        f"(listed as step {side.global_step})")
    if side.video is not None and side.video not in {v.name for v in videos}:
        warnings.append(f"sidecar names video '{side.video}', which is not in {rel_dir}/")
    if not videos:
        warnings.append("video file is missing (only the sidecar exists)")
    # The file the sidecar names first: the browser plays the first source it can decode.
    videos.sort(key=lambda v: (v.name != side.video, v.suffix.lower() != ".mp4", v.name))
    for v in videos:
        if v.stat().st_size == 0:
            warnings.append(f"{v.name} is empty (recording interrupted?)")
    video_id = f"{run.id}/{rel_dir}/{stem}"
    # The sidecar is authoritative (a config may point eval videos at video/train); the
    # folder names are the fallback when it is missing or invalid.
    return {
        "id": video_id, "run": run.id, "run_name": run.name, "mode": side.mode or mode,
        "global_step": step if side.global_step is None else side.global_step,
        "tag": stem, "path": f"{rel_dir}/{stem}",
        "sources": [{"url": url_for(run, f"{rel_dir}/{v.name}"), "type": VIDEO_TYPES[v.suffix.lower()]}
                    for v in videos],
        "sidecar_url": url_for(run, f"{rel_dir}/{sidecar_path.name}") if sidecar_path else None,
        "policy_version": side.policy_version, "env_worker": side.env_worker, "stage": side.stage,
        "simulator": side.simulator, "fps": side.fps, "num_frames": side.num_frames, "grid": side.grid,
        "warnings": warnings,
        "episodes": [dict(ep.to_json(), id=f"{video_id}#{k}") for k, ep in enumerate(side.episodes)],
    }


def _scan_videos(run: Run, url_for: UrlFor, warnings: list[str]) -> list[dict[str, Any]]:
    base = run.root / "video"
    if not base.is_dir():
        return []
    entries = []
    for mode_dir in sorted(base.iterdir()):
        if not mode_dir.is_dir():
            continue
        if mode_dir.name not in MODES:
            warnings.append(f"video/{mode_dir.name}/ ignored: expected video/train or video/eval")
            continue
        for step_dir in sorted(mode_dir.iterdir()):
            match = _STEP_DIR.match(step_dir.name)
            rel_dir = f"video/{mode_dir.name}/{step_dir.name}"
            if not match or not step_dir.is_dir():
                continue
            groups: dict[str, list[Path]] = {}
            for f in sorted(step_dir.iterdir()):
                if f.suffix.lower() not in VIDEO_TYPES and f.suffix.lower() != ".json":
                    continue
                if not is_within(Path(os.path.realpath(f)), run.root) or not f.is_file():
                    warnings.append(f"{rel_dir}/{f.name} skipped: not a regular file inside the run directory")
                    continue
                groups.setdefault(f.stem, []).append(f)
            entries.extend(
                _video_entry(run, rel_dir, mode_dir.name, int(match.group(1)), stem, files, url_for)
                for stem, files in groups.items())
    return entries


def build_catalog(runs: list[Run], url_for: UrlFor) -> dict[str, Any]:
    """The whole page's data: runs (with curves and warnings) and their videos/episodes."""
    out_runs, videos = [], []
    for run in runs:
        warnings: list[str] = []
        if not is_within(Path(os.path.realpath(run.root / "video")), run.root):
            warnings.append("video/ is a link pointing outside the run directory; not served")
            run_videos = []
        else:
            run_videos = _scan_videos(run, url_for, warnings)
        curves = read_metrics(run.root / "metrics.jsonl")
        warnings.extend(curves.warnings)
        health = read_health(run.root, curves.series, warnings)
        has_config = (run.root / "config.yaml").is_file()
        out_runs.append({
            "id": run.id, "name": run.name, "path": str(run.root),
            "config_url": url_for(run, "config.yaml") if has_config else None,
            "metrics": curves.series, "health": health.to_json(), "warnings": warnings,
        })
        videos.extend(run_videos)
    return {"version": CATALOG_VERSION, "runs": out_runs, "videos": videos}
