"""`--export OUT_DIR`: a static copy of the review page that opens from disk (file://).

Browsers block fetch() on file:// pages, so the catalog is written as a script
(`data.js` sets `window.REVIEW_DATA`) loaded by a plain <script> tag. Videos, sidecars,
metrics and config are copied (or symlinked with `link=True`) under `files/<run id>/`, using
the same containment check as the server, so an export never carries files from outside
the run directories.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import quote

from embodied_rl.errors import UserError
from embodied_rl.review.catalog import Run, build_catalog
from embodied_rl.review.paths import PathRefused, resolve_inside
from embodied_rl.review.server import STATIC_DIR

MARKER = ".embodied-rl-review-export"
DATA_TAG = "<!-- review-data -->"


def _prepare(out: Path, runs: list[Run]) -> None:
    """Create `out`, or clear it when it holds a previous export; refuse anything else."""
    real = out.resolve()
    for run in runs:
        if real == run.root or run.root in real.parents or real in run.root.parents:
            raise UserError(f"--export {out}: choose a directory outside the run directory {run.root}")
    if out.exists():
        if not out.is_dir():
            raise UserError(f"--export {out} is a file; pass a new or empty directory")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise UserError(f"--export {out} is not empty and not a previous export; pass a new directory")
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by embodied-rl review --export; safe to delete\n")


def _place(src: Path, dst: Path, link: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link:
        os.symlink(src, dst)
    else:
        shutil.copy2(src, dst)


def export_static(runs: list[Run], out_dir: str, link: bool = False) -> dict[str, int]:
    """Write the static site; returns counts {"videos", "episodes", "files"} for the CLI."""
    out = Path(out_dir).expanduser()
    _prepare(out, runs)
    wanted: list[tuple[Run, str]] = []

    def url_for(run: Run, rel: str) -> str:
        wanted.append((run, rel))
        return f"files/{run.id}/{quote(rel)}"

    catalog = build_catalog(runs, url_for)
    copied = 0
    for run, rel in wanted:
        try:
            src = resolve_inside(run.root, rel)
        except (PathRefused, FileNotFoundError):
            continue  # the catalog already carries a warning for such a file
        dst = out / "files" / run.id / rel
        if not dst.exists():
            _place(src, dst, link)
            copied += 1
    shutil.copytree(STATIC_DIR, out / "static", ignore=shutil.ignore_patterns("index.html"))
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    if DATA_TAG not in page:
        raise RuntimeError(f"{STATIC_DIR / 'index.html'} lacks the {DATA_TAG} placeholder")
    (out / "index.html").write_text(page.replace(DATA_TAG, '<script src="data.js"></script>'), encoding="utf-8")
    # ensure_ascii escapes U+2028/9, so the JSON is also a valid JS expression.
    (out / "data.js").write_text(f"window.REVIEW_DATA = {json.dumps(catalog, ensure_ascii=True)};\n")
    return {"videos": len(catalog["videos"]), "files": copied,
            "episodes": sum(len(v["episodes"]) for v in catalog["videos"])}
