"""The Vulkan drivers processes are pointed at, on machines with and without a GPU Vulkan driver.

Shipped ManiSkill configs render with `render_backend: cpu` (the private software driver), so it
must be listed on GPU nodes too, beside their GPU drivers (which `render_backend: gpu` needs).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rl.process_env import (
    gpu_vulkan_icds,
    icd_search_dirs,
    private_vulkan_icd,
    vulkan_env,
)


def manifest(path: Path, library: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.3.0"}}))
    return path


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    """A system ICD directory holding the distribution's lavapipe, and the private software driver."""
    icd_dir = tmp_path / "usr/share/vulkan/icd.d"
    manifest(icd_dir / "lvp_icd.x86_64.json", "libvulkan_lvp.so")  # the system's, too old for SAPIEN
    return {"icd_dir": icd_dir, "lvp": manifest(tmp_path / "home/vulkan/lvp_icd.json", "/x/libvulkan_lvp.so"),
            "sapien_nvidia": manifest(tmp_path / "sapien/nvidia_icd.json", "libGLX_nvidia.so.0")}


def env_for(m: dict[str, Path], *, nvidia_gpu: bool, software: bool = True, environ: dict[str, str] | None = None) -> dict[str, str]:
    return vulkan_env(environ or {}, [m["icd_dir"]], m["lvp"] if software else None, nvidia_gpu, m["sapien_nvidia"])


def test_a_machine_without_a_gpu_driver_gets_the_software_driver_alone(machine: dict[str, Path]) -> None:
    assert env_for(machine, nvidia_gpu=False) == {"VK_ICD_FILENAMES": str(machine["lvp"])}
    assert env_for(machine, nvidia_gpu=False, software=False) == {}  # nothing to point at: the loader's own search


def test_a_gpu_node_lists_its_gpu_driver_beside_the_software_one(machine: dict[str, Path]) -> None:
    nvidia = manifest(machine["icd_dir"] / "nvidia_icd.json", "libGLX_nvidia.so.0")
    assert env_for(machine, nvidia_gpu=True) == {"VK_ICD_FILENAMES": f"{nvidia}:{machine['lvp']}"}
    # without the software driver the loader's own search finds the GPU, as before
    assert env_for(machine, nvidia_gpu=True, software=False) == {}


def test_an_nvidia_driver_without_a_manifest_gets_the_one_sapien_would_use(machine: dict[str, Path]) -> None:
    assert env_for(machine, nvidia_gpu=True) == {"VK_ICD_FILENAMES": f"{machine['sapien_nvidia']}:{machine['lvp']}"}
    amd = manifest(machine["icd_dir"] / "radeon_icd.x86_64.json", "libvulkan_radeon.so")
    assert gpu_vulkan_icds([machine["icd_dir"]], False, machine["sapien_nvidia"]) == [amd]


def test_drivers_the_user_chose_are_kept(machine: dict[str, Path]) -> None:
    for key in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):
        assert env_for(machine, nvidia_gpu=True, environ={key: "/mine.json"}) == {}


def test_the_search_follows_the_loaders_directories() -> None:
    dirs = icd_search_dirs({"HOME": "/h", "XDG_DATA_DIRS": "/opt/share:/usr/share"})
    assert dirs == [Path(p) for p in ("/h/.config/vulkan/icd.d", "/etc/xdg/vulkan/icd.d", "/etc/vulkan/icd.d",
                                      "/h/.local/share/vulkan/icd.d", "/opt/share/vulkan/icd.d", "/usr/share/vulkan/icd.d")]


@pytest.mark.skipif(private_vulkan_icd() is None, reason="the software Vulkan driver is not installed (scripts/setup.sh)")
def test_sapien_finds_its_cpu_render_device_with_a_gpu_driver_listed_first(machine: dict[str, Path], tmp_path: Path) -> None:
    """What a GPU node's processes get, on this machine: its GPU manifest first (here a driver
    whose library is absent, as this machine has no GPU), then the private software driver."""
    gpu = manifest(machine["icd_dir"] / "nvidia_icd.json", str(tmp_path / "absent/libGLX_nvidia.so.0"))
    software = private_vulkan_icd()
    listed = vulkan_env({}, [machine["icd_dir"]], software, True, None)["VK_ICD_FILENAMES"]
    assert listed == f"{gpu}:{software}"
    probe = "import sapien; sapien.render.RenderSystem(sapien.Device('cpu')); print('rendering on cpu')"
    for value, renders in ((listed, True), (str(gpu), False)):  # the GPU manifest alone: no CPU device
        proc = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], check=False, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "VK_ICD_FILENAMES": value})
        assert (proc.returncode == 0 and "rendering on cpu" in proc.stdout) == renders, proc.stderr[-2000:]
