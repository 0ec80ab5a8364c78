"""Set-up scripts: the pip stamp, a second set-up run skipping installs, and the CI guard."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMPED = ["pyproject.toml", "requirements/constraints-cpu.txt", "requirements/constraints-gpu.txt", "scripts/setup.sh"]


def _copy(files: list[str], dest: Path) -> Path:
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    return dest


def _stamp(repo: Path) -> str:
    out = subprocess.run(["bash", str(repo / "scripts/setup.sh"), "--print-stamp"], check=True,
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_stamp_tracks_exactly_what_pip_installs(tmp_path: Path) -> None:
    copy = _copy(STAMPED + ["README.md"], tmp_path)
    first = _stamp(copy)
    assert len(first) == 64 and first == _stamp(copy) == _stamp(REPO)  # stable, content-based
    (copy / "README.md").write_text("changed\n")
    assert _stamp(copy) == first  # unrelated files do not trigger a reinstall
    with (copy / "pyproject.toml").open("a") as f:
        f.write("\n# new dependency\n")
    assert _stamp(copy) != first


def test_second_setup_run_skips_installs() -> None:
    """On a set-up checkout, setup.sh verifies everything and installs nothing (--no-install fails otherwise)."""
    proc = subprocess.run(["bash", str(REPO / "scripts/setup.sh"), "--no-install"], check=False, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "python packages up to date" in proc.stderr


def test_ci_fails_when_no_tests_are_collected(tmp_path: Path) -> None:
    _copy([".ci/run"], tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "scripts").mkdir()
    # The CI script's contract with run.sh: run pytest over tests/ and pass its exit code on.
    (tmp_path / "scripts/run.sh").write_text(f"exec {sys.executable} -m pytest tests -q -p no:cacheprovider\n")
    proc = subprocess.run(["bash", str(tmp_path / ".ci/run")], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "collected no tests" in proc.stderr
