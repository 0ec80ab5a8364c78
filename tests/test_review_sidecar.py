"""Sidecar validation and metrics.jsonl reading for the review page (pure Python, fast)."""
from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_rl.review.metrics import read_metrics
from embodied_rl.review.sidecar import load_sidecar, parse_sidecar

GOOD = {
    "schema_version": 2, "run_name": "exp", "mode": "train", "global_step": 3, "policy_version": 3,
    "env_worker": 0, "stage": 0, "simulator": "maniskill", "video": "worker0_stage0.mp4", "fps": 20,
    "num_frames": 100, "grid": {"rows": 1, "cols": 2, "tile_height": 128, "tile_width": 256, "num_envs": 2},
    "episodes": [{"env_index": 0, "task_id": "PickCube-v1", "instruction": "pick up the red cube",
                  "reset_id": 12, "return": 1.0, "success": True, "success_once": True,
                  "success_at_end": True, "length": 50, "frame_start": 0, "frame_end": 50, "failed": False}],
}


def _with(**changes):
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if key.startswith("ep_"):
            data["episodes"][0][key[3:]] = value
        else:
            data[key] = value
    return data


def test_valid_sidecar_has_no_warnings():
    side = parse_sidecar(GOOD)
    assert side.warnings == [] and side.grid == GOOD["grid"] and side.fps == 20
    (ep,) = side.episodes
    assert ep.seekable and ep.warnings == [] and ep.finished
    assert ep.to_json()["return"] == 1.0 and ep.to_json()["task_id"] == "PickCube-v1"


def test_problems_become_warnings_not_errors():
    side = parse_sidecar(_with(global_step="3", mode="test", ep_frame_end=500, ep_success=1))
    text = " ".join(side.warnings)
    assert "'global_step' should be int" in text and "mode 'test'" in text
    assert side.global_step is None and side.mode is None
    (ep,) = side.episodes
    assert not ep.seekable and "beyond num_frames 100" in " ".join(ep.warnings)
    assert ep.success is None and "'success' should be bool" in " ".join(ep.warnings)
    assert not parse_sidecar(_with(ep_frame_start=50, ep_frame_end=50)).episodes[0].seekable
    assert parse_sidecar(_with(ep_env_index=5)).episodes[0].env_index is None
    assert parse_sidecar(_with(grid={"rows": 1})).grid is None
    assert "schema_version 3" in parse_sidecar(_with(schema_version=3)).warnings[0]
    assert parse_sidecar(_with(episodes=[1, GOOD["episodes"][0]])).episodes[0].task_id == "PickCube-v1"
    assert parse_sidecar([1, 2]).warnings == ["sidecar: top level is not a JSON object"]


def test_version_1_sidecars_read_without_warnings():
    old = {("checkpoint_step" if k == "policy_version" else k): v for k, v in GOOD.items()} | {"schema_version": 1}
    side = parse_sidecar(old)
    assert side.policy_version == 3 and not side.warnings


def test_episodes_cut_before_their_first_action_are_stubs():
    def stub(**ep) -> bool:
        return parse_sidecar(_with(**{f"ep_{k}": v for k, v in ep.items()})).episodes[0].stub

    assert stub(finished=False, length=0, frame_start=99, frame_end=100)
    assert stub(finished=False, length=1, frame_start=99, frame_end=100)  # older recorders counted frames
    assert not stub(finished=False, length=8, frame_start=91, frame_end=100)  # a partial episode: listed
    assert not stub(finished=True, length=0, frame_start=99, frame_end=100)  # ended on reset: a real outcome
    assert not stub()


def test_missing_and_corrupt_files(tmp_path):
    assert "is missing" in load_sidecar(tmp_path / "a.json").warnings[0]
    (tmp_path / "b.json").write_text('{"episodes": [')
    side = load_sidecar(tmp_path / "b.json")
    assert "corrupt JSON" in side.warnings[0] and side.episodes == []
    (tmp_path / "c.json").write_bytes(b"\xff\xfe\x00")
    assert "unreadable" in load_sidecar(tmp_path / "c.json").warnings[0]


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12),
       st.sampled_from(["", "grid", "episodes", "fps", "num_frames"]))
def test_arbitrary_json_never_crashes(junk, key):
    side = parse_sidecar(junk if not key else _with(**{key: junk}))
    json.dumps([ep.to_json() for ep in side.episodes], allow_nan=False)  # always JSON-safe


def test_metrics_jsonl_tolerates_partial_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "env/return": 1.5, "env/success_once": 0.0, "note": "x"}\n'
        '{"step": 2, "env/return": NaN, "env/success_once": 0.5, "flag": true}\n'
        "[1, 2]\n{\"env/return\": 3}\n"
        '{"step": 2, "env/success_once": 0.75}\n'
        '{"step": 3, "env/ret')  # a line the runtime is still writing
    curves = read_metrics(path)
    assert curves.series == {"env/return": [[1, 1.5]], "env/success_once": [[1, 0.0], [2, 0.75]]}
    assert [w.split(":")[0] for w in curves.warnings] == ["metrics.jsonl line 3", "metrics.jsonl line 4",
                                                           "metrics.jsonl line 6"]
    assert read_metrics(tmp_path / "none.jsonl").series == {}
