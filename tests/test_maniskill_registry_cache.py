"""The config check's ManiSkill answers (task ids, robots, control modes, cameras) come from a
per-user cache file after the first process, so a later print-config/train/eval does not import
ManiSkill; the cache never refuses what the live registries accept, nor accepts what they refuse.

Each check runs in a fresh interpreter (this one has imported ManiSkill already, and then the
live registries answer), with its own EMBODIED_RL_HOME.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from embodied_rl.fact_cache import FactCache

CHECK = """
import json, sys
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.envs.maniskill.registry import check_names
from embodied_rl.errors import ConfigError
verdicts = []
for overrides in json.loads(sys.argv[1]):
    params = ManiSkillParams(**{"id": "PushCube-v1", "obs_mode": "rgb", "control_mode": "pd_ee_delta_pose", **overrides})
    try:
        check_names(params, "env.train.init_params")
        verdicts.append("ok")
    except ConfigError as err:
        verdicts.append(str(err))
print(json.dumps({"verdicts": verdicts, "imported": "mani_skill.envs" in sys.modules}))
"""
CASES = [{}, {"control_mode": "pd_ee_delta_pse"}, {"main_camera": "base_cam"}, {"id": "PushCub-v1"}]


def _check(home: Path, cases: list[dict]) -> dict:
    env = dict(os.environ, EMBODIED_RL_HOME=str(home))
    proc = subprocess.run([sys.executable, "-c", CHECK, json.dumps(cases)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_checks_without_importing_maniskill_and_gives_the_same_verdicts(tmp_path: Path) -> None:
    first = _check(tmp_path, CASES)
    second = _check(tmp_path, [CASES[0], CASES[2]])
    assert first["imported"] and not second["imported"]
    assert second["verdicts"] == [first["verdicts"][0], first["verdicts"][2]]
    # a refused task id or control mode is confirmed by the live registries, with the same message
    assert _check(tmp_path, [CASES[1], CASES[3]])["verdicts"] == [first["verdicts"][1], first["verdicts"][3]]
    assert first["verdicts"][0] == "ok"
    assert "is not a control mode of panda; did you mean env.train.init_params.control_mode=pd_ee_delta_pose?" in first["verdicts"][1]
    assert "is not a camera of PushCube-v1 with panda" in first["verdicts"][2]
    assert "is not a ManiSkill task; did you mean env.train.init_params.id=PushCube-v1?" in first["verdicts"][3]


def test_a_name_missing_from_the_cache_is_looked_up_live(tmp_path: Path) -> None:
    _check(tmp_path, CASES[:1])
    path = tmp_path / "maniskill_registry.json"
    stored = json.loads(path.read_text())
    stored["facts"]["tasks"] = ["SomethingElse-v1"]  # as if PushCube-v1 had been registered since
    path.write_text(json.dumps(stored))
    again = _check(tmp_path, CASES[:1])
    assert again == {"verdicts": ["ok"], "imported": True}


def test_a_cache_of_other_files_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"fingerprint": "old", "facts": {"tasks": ["A"]}}))
    assert FactCache(path, "new").facts == {}
    assert FactCache(path, "old").facts == {"tasks": ["A"]}
    assert FactCache(path, "old", live=lambda: True).get("tasks", lambda: ["B"]) == ["B"]  # stored where it differs
    assert FactCache(path, "old").facts == {"tasks": ["B"]}
    path.write_text("{not json")
    assert FactCache(path, "old").facts == {}
