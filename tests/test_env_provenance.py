"""environment.json: the simulator, renderer and package versions behind a run's numbers."""
from __future__ import annotations

import json
from importlib import metadata

from embodied_rl.envs.provenance import simulator_facts, write_environment


def test_facts_name_the_installed_simulators_and_the_renderer(tmp_path, monkeypatch) -> None:
    icd = tmp_path / "vulkan" / "lvp_icd.json"
    icd.parent.mkdir()
    icd.write_text(json.dumps({"ICD": {"api_version": "1.4.305", "library_path": "/x/libvulkan_lvp.so"}}))
    (icd.parent / "VERSION").write_text("mesa-vulkan-drivers_25.0.7_amd64.deb\n")
    monkeypatch.setenv("VK_ICD_FILENAMES", str(icd))
    monkeypatch.setenv("MUJOCO_GL", "egl")
    facts = simulator_facts()
    assert facts["packages"]["mani-skill"] == metadata.version("mani-skill")
    assert facts["packages"]["mujoco"] == metadata.version("mujoco")
    assert facts["render"]["vulkan_icd"] == {"file": str(icd), "api_version": "1.4.305", "library_path": "/x/libvulkan_lvp.so",
                                             "package": "mesa-vulkan-drivers_25.0.7_amd64.deb"}
    assert facts["render"]["MUJOCO_GL"] == "egl"


def test_facts_name_each_icd_where_a_gpu_node_lists_several(tmp_path, monkeypatch) -> None:
    gpu, lvp = tmp_path / "nvidia_icd.json", tmp_path / "lvp_icd.json"
    gpu.write_text(json.dumps({"ICD": {"library_path": "libGLX_nvidia.so.0"}}))
    lvp.write_text(json.dumps({"ICD": {"library_path": "/x/libvulkan_lvp.so"}}))
    monkeypatch.setenv("VK_ICD_FILENAMES", f"{gpu}:{lvp}")
    assert simulator_facts()["render"]["vulkan_icd"] == [{"file": str(gpu), "library_path": "libGLX_nvidia.so.0"},
                                                         {"file": str(lvp), "library_path": "/x/libvulkan_lvp.so"}]


def test_environment_file_keeps_each_distinct_worker_once(tmp_path) -> None:
    a, b = {"packages": {"sapien": "3.0.3"}, "host": "n1"}, {"packages": {"sapien": "3.0.3"}, "host": "n2"}
    path = write_environment(tmp_path / "run", [a, b, dict(a)])
    assert json.loads(path.read_text()) == {"env_workers": [a, b]}
