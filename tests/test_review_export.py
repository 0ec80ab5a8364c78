"""Static export (`embodied-rl review RUN --export OUT`): contents, safety, re-export."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from embodied_rl.errors import UserError
from embodied_rl.review.catalog import discover_runs
from embodied_rl.review.cli import main
from embodied_rl.review.export import export_static
from tests.browser_support import make_run_with_escape_links


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run_with_escape_links(tmp_path_factory.mktemp("review_export"))


def _data(site: Path) -> dict:
    text = (site / "data.js").read_text()
    prefix = "window.REVIEW_DATA = "
    assert text.startswith(prefix)
    return json.loads(text[len(prefix):].rstrip().rstrip(";"))


def test_export_is_self_contained(run_dir, tmp_path):
    site = tmp_path / "site"
    assert main([str(run_dir), "--export", str(site)]) == 0
    data = _data(site)
    assert len(data["videos"]) == 6 and sum(len(v["episodes"]) for v in data["videos"]) == 13
    for video in data["videos"]:
        for src in video["sources"]:
            copied = site / src["url"]
            assert copied.is_file() and not copied.is_symlink() and copied.stat().st_size > 0
    page = (site / "index.html").read_text()
    assert '<script src="data.js"></script>' in page and "static/main.js" in page
    assert (site / "static" / "main.js").is_file() and not (site / "static" / "index.html").exists()
    # Nothing from outside the run came along (the symlinked secret is excluded).
    assert not any("TOPSECRET" in p.read_text(errors="ignore") for p in site.rglob("*") if p.is_file())
    # Exactly the files the page links (videos, sidecars, config), nothing else of the run.
    linked = {s["url"] for v in data["videos"] for s in v["sources"]}
    linked |= {v["sidecar_url"] for v in data["videos"] if v["sidecar_url"]} | {data["runs"][0]["config_url"]}
    assert {p.relative_to(site).as_posix() for p in (site / "files").rglob("*") if p.is_file()} == linked
    # Exporting again over a previous export replaces it.
    assert main([str(run_dir), "--export", str(site)]) == 0


def test_export_links_and_refusals(run_dir, tmp_path):
    runs = discover_runs([str(run_dir)])
    counts = export_static(runs, str(tmp_path / "linked"), link=True)
    assert counts == {"videos": 6, "episodes": 13, "files": counts["files"]} and counts["files"] >= 11
    mp4 = tmp_path / "linked" / "files" / "0" / "video" / "train" / "step_000001" / "worker0_stage0.mp4"
    assert mp4.is_symlink() and os.path.realpath(mp4) == str(run_dir / mp4.relative_to(tmp_path / "linked" / "files" / "0"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty and not a previous export"):
        export_static(runs, str(tmp_path / "other"))
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    with pytest.raises(UserError, match="outside the run directory"):
        export_static(runs, str(run_dir / "site"))
