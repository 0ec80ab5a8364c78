"""Process environment the simulators need, set from Python so that calling
`.venv/bin/embodied-rl` directly works as well as the `scripts/run.sh` wrapper.

Variables the user already set are never changed. Child processes (Ray workers, simulator
subprocesses) inherit what is set here, so call `configure_process_env()` before starting them.
"""
from __future__ import annotations

import ctypes.util
import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

# Manifests of software Vulkan drivers: not GPU drivers, and the system's lavapipe (Debian 12:
# Mesa 22.3) lacks a feature SAPIEN needs, so only the private one is listed.
_SOFTWARE_ICDS = ("lvp_icd", "lavapipe", "swiftshader")

#: Every worker process of a run has RUN_TAG=<run id> in its environment (runtime/groups.py), and
#: so does whatever it starts: how a run's processes and shared-memory segments are told apart.
RUN_TAG = "EMBODIED_RL_RUN"


def embodied_rl_home() -> Path:
    """Per-user cache of system pieces installed by scripts/setup.sh (Vulkan driver, LIBERO config)."""
    return Path(os.environ.get("EMBODIED_RL_HOME") or Path.home() / ".cache" / "embodied_rl")


def private_vulkan_icd() -> Path | None:
    """The ICD json written by scripts/install_vulkan.sh, if installed."""
    icd = embodied_rl_home() / "vulkan" / "lvp_icd.json"
    return icd if icd.is_file() else None


def icd_search_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Where the Vulkan loader looks for driver manifests on Linux, in its order."""
    home = Path(environ.get("HOME") or Path.home())
    config_dirs = [environ.get("XDG_CONFIG_HOME") or str(home / ".config"),
                   *(environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":"), "/etc"]
    data_dirs = [environ.get("XDG_DATA_HOME") or str(home / ".local" / "share"),
                 *(environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")]
    return [Path(d) / "vulkan" / "icd.d" for d in config_dirs + data_dirs if d]


def nvidia_gpu_present() -> bool:
    """The NVIDIA kernel driver lists a GPU (also inside containers given one); cheaper than nvidia-smi."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def sapien_nvidia_icd() -> Path | None:
    """The NVIDIA manifest SAPIEN ships for drivers installed without one, found without importing SAPIEN."""
    spec = importlib.util.find_spec("sapien")
    for root in (spec.submodule_search_locations or []) if spec else []:
        icd = Path(root) / "vulkan_library" / "nvidia_icd.json"
        if icd.is_file():
            return icd
    return None


def gpu_vulkan_icds(dirs: Sequence[Path], nvidia_gpu: bool, fallback_nvidia_icd: Path | None) -> list[Path]:
    """Manifests of the GPU Vulkan drivers in `dirs`. With an NVIDIA GPU whose driver installed no
    manifest, `fallback_nvidia_icd`: SAPIEN uses its own then, unless VK_ICD_FILENAMES is set."""
    found = [p for d in dirs if d.is_dir() for p in sorted(d.glob("*.json")) if not p.name.startswith(_SOFTWARE_ICDS)
             and "lavapipe" not in p.name]
    if nvidia_gpu and fallback_nvidia_icd is not None and not any("nvidia" in p.name for p in found):
        found.append(fallback_nvidia_icd)
    return list(dict.fromkeys(found))


def vulkan_icd_files(gpu_icds: Sequence[Path], software_icd: Path | None) -> str | None:
    """VK_ICD_FILENAMES: the software driver beside the GPU drivers, so that SAPIEN finds a CPU
    device for `render_backend: cpu` and the GPU for `gpu` on any node; None (the loader's own
    search) without the software driver. Listing only the software driver on a GPU node would
    hide the GPU from `render_backend: gpu`."""
    if software_icd is None:
        return None
    return ":".join(str(p) for p in [*gpu_icds, software_icd])


def vulkan_env(environ: Mapping[str, str], icd_dirs: Sequence[Path], software_icd: Path | None, nvidia_gpu: bool,
               fallback_nvidia_icd: Path | None) -> dict[str, str]:
    """The Vulkan variables to set for this machine; none where the user chose the drivers."""
    if "VK_ICD_FILENAMES" in environ or "VK_DRIVER_FILES" in environ:
        return {}
    files = vulkan_icd_files(gpu_vulkan_icds(icd_dirs, nvidia_gpu, fallback_nvidia_icd), software_icd)
    return {} if files is None else {"VK_ICD_FILENAMES": files}


def choose_mujoco_gl() -> str | None:
    """EGL (GPU via the NVIDIA EGL vendor library, CPU via Mesa llvmpipe), else OSMesa."""
    if ctypes.util.find_library("EGL"):
        return "egl"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return None


def configure_process_env() -> dict[str, str]:
    """Set VK_ICD_FILENAMES (see `vulkan_icd_files`) and MUJOCO_GL when unset; returns what was set."""
    changed = vulkan_env(os.environ, icd_search_dirs(os.environ), private_vulkan_icd(), nvidia_gpu_present(),
                         sapien_nvidia_icd())
    if "MUJOCO_GL" not in os.environ:
        backend = choose_mujoco_gl()
        if backend is not None:
            changed["MUJOCO_GL"] = backend
    if changed.get("MUJOCO_GL") == "osmesa" and "PYOPENGL_PLATFORM" not in os.environ:
        changed["PYOPENGL_PLATFORM"] = "osmesa"  # PyOpenGL must agree with MuJoCo's GL backend
    os.environ.update(changed)
    return changed
