"""Process environment the simulators need, set from Python so that calling
`.venv/bin/embodied-rl` directly works as well as the `scripts/run.sh` wrapper.

Variables the user already set are never changed. Child processes (Ray workers, simulator
subprocesses) inherit what is set here, so call `configure_process_env()` before starting them.
"""
from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

# Vendor ICDs of GPU Vulkan drivers; software ICDs (lavapipe, swiftshader) do not count.
_ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
_SOFTWARE_ICDS = ("lvp_icd", "lavapipe", "swiftshader")


def embodied_rl_home() -> Path:
    """Per-user cache of system pieces installed by scripts/setup.sh (Vulkan driver, LIBERO config)."""
    return Path(os.environ.get("EMBODIED_RL_HOME") or Path.home() / ".cache" / "embodied_rl")


def private_vulkan_icd() -> Path | None:
    """The ICD json written by scripts/install_vulkan.sh, if installed."""
    icd = embodied_rl_home() / "vulkan" / "lvp_icd.json"
    return icd if icd.is_file() else None


def gpu_vulkan_icd_present() -> bool:
    for d in _ICD_DIRS:
        for path in Path(d).glob("*.json") if Path(d).is_dir() else ():
            if not path.name.startswith(_SOFTWARE_ICDS) and "lavapipe" not in path.name:
                return True
    return False


def choose_mujoco_gl() -> str | None:
    """EGL (GPU via the NVIDIA EGL vendor library, CPU via Mesa llvmpipe), else OSMesa."""
    if ctypes.util.find_library("EGL"):
        return "egl"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return None


def configure_process_env() -> dict[str, str]:
    """Set VK_ICD_FILENAMES and MUJOCO_GL when unset; returns what was set."""
    changed: dict[str, str] = {}
    if "VK_ICD_FILENAMES" not in os.environ and not gpu_vulkan_icd_present():
        icd = private_vulkan_icd()
        if icd is not None:
            changed["VK_ICD_FILENAMES"] = str(icd)
    if "MUJOCO_GL" not in os.environ:
        backend = choose_mujoco_gl()
        if backend is not None:
            changed["MUJOCO_GL"] = backend
    if changed.get("MUJOCO_GL") == "osmesa" and "PYOPENGL_PLATFORM" not in os.environ:
        changed["PYOPENGL_PLATFORM"] = "osmesa"  # PyOpenGL must agree with MuJoCo's GL backend
    os.environ.update(changed)
    return changed
