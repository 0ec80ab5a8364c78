"""What produced a run's numbers: simulator, renderer and package versions of an env process.

Success rates move with the simulator and renderer versions (LIBERO's published numbers, for
one, depend on MuJoCo and robosuite releases), so every run stores these facts in
`environment.json` beside `metrics.jsonl`, as seen by the env workers that stepped the sims.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("embodied-rl", "mani-skill", "sapien", "libero", "robosuite", "mujoco", "torch", "numpy")
# Debian packages of Mesa's GL/EGL/OSMesa (MuJoCo's software rendering on a CPU machine).
MESA_PACKAGES = ("libegl-mesa0", "libosmesa6", "libgl1-mesa-dri")
ENVIRONMENT_FILE = "environment.json"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _vulkan_icd(path: str) -> dict[str, Any]:
    """A Vulkan ICD SAPIEN may render with (VK_ICD_FILENAMES), with the driver package when the
    set-up script installed it privately (its VERSION file names the Debian package file)."""
    icd: dict[str, Any] = {"file": path}
    try:
        icd.update(json.loads(Path(path).read_text()).get("ICD", {}))
    except (OSError, ValueError) as err:
        icd["error"] = f"{type(err).__name__}: {err}"
    version_file = Path(path).parent / "VERSION"
    if version_file.is_file():
        icd["package"] = version_file.read_text().strip()
    return icd


def _vulkan_icds(value: str | None) -> dict[str, Any] | list[dict[str, Any]] | None:
    """One ICD's facts, or a list of them where VK_ICD_FILENAMES lists several (a GPU node lists
    its GPU drivers beside the software one)."""
    icds = [_vulkan_icd(path) for path in (value or "").split(":") if path]
    return None if not icds else icds[0] if len(icds) == 1 else icds


def _debian_versions(names: tuple[str, ...]) -> dict[str, str]:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Version}\\n", *names],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line and line.split(" ", 1)[1])


def simulator_facts() -> dict[str, Any]:
    """Versions and rendering set-up of this process (call it in an env worker)."""
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "render": {
            "vulkan_icd": _vulkan_icds(os.environ.get("VK_ICD_FILENAMES")),
            "MUJOCO_GL": os.environ.get("MUJOCO_GL"),
            "mesa": _debian_versions(MESA_PACKAGES),
        },
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": platform.node(),
    }


def distinct(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per distinct set of facts, in first-seen order."""
    return [json.loads(s) for s in dict.fromkeys(json.dumps(f, sort_keys=True) for f in facts)]


def write_environment(run_dir: Path, facts: list[dict[str, Any]]) -> Path:
    """environment.json: the distinct facts of the run's env workers (one entry per distinct set)."""
    unique = distinct(facts)
    path = Path(run_dir) / ENVIRONMENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"env_workers": unique}, indent=1) + "\n")
    return path
