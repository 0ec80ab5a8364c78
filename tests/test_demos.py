"""Expert demonstrations on real ManiSkill3 (PickCube-v1, 64 px, CPU sim).

The module records a few demos once through the CLI (two worker processes) and shares one
in-process recorder (the sub-env class the RL env pool runs) for the open-loop replay and the
failure counting; the bad-input cases only read files.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from embodied_rl.cli import main as cli_main
from embodied_rl.configure import load_config
from embodied_rl.demos import DemoError, load_demos, load_demos_for, read_manifest
from embodied_rl.demos.generate import generate_demos
from embodied_rl.demos.reader import check_demos_for
from embodied_rl.demos.recorder import DemoRecorder
from embodied_rl.demos.sources import LocalSource
from embodied_rl.demos.spec import DemoSpec
from embodied_rl.envs.action_adapter import ActionAdapter
from embodied_rl.errors import ConfigError

pytestmark = pytest.mark.maniskill

CONFIG = "maniskill_ppo_tiny"  # PickCube-v1, 64 px, chunk 8, goal appended to the state
NUM = 3


@pytest.fixture(scope="module")
def cfg():
    return load_config(CONFIG)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demos") / "pick"
    rc = cli_main(["demos", CONFIG, "--num-demos", str(NUM), "--out", str(out), "--workers", "2", "--quiet"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def recorder(cfg):
    rec = DemoRecorder(DemoSpec.from_config(cfg))
    yield rec
    rec.close()


@pytest.fixture
def copy_of(demo_dir, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(demo_dir, dst)
    return dst


def load(path: Path, **kw):
    base = {"chunk_len": 8, "action_dim": 7, "task_id": "PickCube-v1", "image_size": (64, 64),
            "control_mode": "pd_ee_delta_pose", "state_dim": 12}
    return load_demos(path, **{**base, **kw})


@pytest.mark.slow
def test_generated_demos_read_back(demo_dir, cfg):
    m = read_manifest(demo_dir)
    assert (m.task_id, m.num_demos, m.num_failed, m.num_attempted) == ("PickCube-v1", NUM, 0, NUM)
    assert [e.reset_id for e in m.episodes] == [0, 1, 2] and all(e.success for e in m.episodes)
    assert m.state_layout[-3:] == ["goal_x", "goal_y", "goal_z"] == m.privileged_state
    assert m.cameras == {"main": "base_camera", "wrist": None} and m.image_size == [64, 64]
    meta = json.loads((demo_dir / "trajectory.json").read_text())  # ManiSkill's metadata
    assert meta["env_info"]["env_id"] == "PickCube-v1"
    assert [e["reset_kwargs"] for e in meta["episodes"]] == [{"seed": i} for i in range(NUM)]

    chunks = load_demos_for(cfg, demo_dir)
    steps = sum(e.length for e in m.episodes)
    assert len(chunks) == steps and chunks.actions.shape == (steps, 8, 7)
    assert chunks.main_images.shape == (steps, 64, 64, 3) and chunks.states.shape == (steps, 12)
    assert chunks.wrist_images is None and chunks.instructions == ["pick up the red cube"] * len(chunks)
    # policy convention: gripper 1 = open, 0 = closed; the last chunk of an episode is padded and masked
    assert set(np.unique(chunks.actions[..., -1])) <= {0.0, 1.0}
    last = np.flatnonzero(chunks.step_index == m.episodes[0].length - 1)[0]
    assert chunks.action_mask[last].tolist() == [True] + [False] * 7
    assert (chunks.actions[last, 1:] == chunks.actions[last, 0]).all()
    # the goal in the state is the goal of the episode: constant within it
    first_ep = chunks.states[chunks.episode_index == 0]
    assert np.ptp(first_ep[:, -3:], axis=0).max() == 0.0


@pytest.mark.slow
def test_open_loop_replay_from_reset_ids_reproduces_success(demo_dir, recorder, cfg):
    """Each stored episode's policy actions, replayed open-loop from its reset id through
    the action adapter and the sub-env class the RL env pool runs, succeed at the last step, and
    every observation the env shows equals the stored one byte for byte."""
    env, adapter = recorder.sub_env, ActionAdapter(cfg.env.train.action_adapter, 7)
    with h5py.File(demo_dir / "trajectory.h5") as h5:
        for e in read_manifest(demo_dir).episodes:
            g = h5[f"traj_{e.episode_id}"]
            images, states = g["obs/sensor_data/base_camera/rgb"][:], g["obs/state"][:]
            obs = env.reset(e.reset_id)
            done = []
            for t, action in enumerate(g["policy_actions"][:]):
                assert np.array_equal(obs["main_image"], images[t]) and np.array_equal(obs["state"], states[t])
                obs, _, terminated, success = env.step(adapter(action))
                done.append((terminated, success))
            assert np.array_equal(obs["main_image"], images[-1]) and np.array_equal(obs["state"], states[-1])
            assert done[-1] == (True, True) and not any(t for t, _ in done[:-1])


@pytest.mark.slow
def test_failed_expert_episodes_are_dropped_and_counted(demo_dir, recorder, tmp_path):
    lengths = [e.length for e in read_manifest(demo_dir).episodes]
    limit = max(lengths) - 1  # the longest episodes of reset ids 0..2 now run out of time
    should_fail = [i for i, n in enumerate(lengths) if n > limit]
    keep = len(lengths) - len(should_fail)
    assert should_fail and keep, lengths
    spec = recorder.spec
    short = dataclasses.replace(spec, env_cfg=dataclasses.replace(spec.env_cfg, max_episode_steps=limit))
    report = generate_demos(short, LocalSource(recorder, short), tmp_path / "d", num_demos=keep, progress=False)
    m = report.manifest
    assert m.failed_reset_ids == should_fail and m.num_failed == len(should_fail)
    assert [e.reset_id for e in m.episodes] == [i for i in range(3) if i not in should_fail]
    assert m.num_attempted == 3 and all(e.length <= limit for e in m.episodes)
    with h5py.File(tmp_path / "d" / "trajectory.h5") as h5:
        assert sorted(h5) == [f"traj_{i}" for i in range(keep)]  # failed episodes are never stored

    # too few successes within --max-attempts: an error and nothing written
    with pytest.raises(DemoError, match=r"only 0 of 1 PickCube-v1 expert episodes succeeded in 1 attempts"):
        generate_demos(short, LocalSource(recorder, short), tmp_path / "none", num_demos=1, max_attempts=1,
                       seed_start=should_fail[0], progress=False)
    assert not (tmp_path / "none").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize("kw, mismatch", [
    ({"task_id": "PushCube-v1"}, "task PickCube-v1, expected PushCube-v1"),
    ({"image_size": (128, 128)}, r"image size \(height x width\) \(64, 64\), expected \(128, 128\)"),
    ({"control_mode": "pd_joint_delta_pos"}, "control mode pd_ee_delta_pose, expected pd_joint_delta_pos"),
    ({"action_dim": 8}, "action_dim 7, expected 8"),
    ({"chunk_len": 4}, r"chunk length \(num_action_chunks\) 8, expected 4"),
    ({"state_dim": 9}, "state dim 12, expected 9"),
])
def test_mismatches_are_one_line_errors_naming_the_file(demo_dir, kw, mismatch):
    with pytest.raises(DemoError, match=f"^{demo_dir / 'manifest.json'}: demos have {mismatch}$"):
        load(demo_dir, **kw)


def test_demos_rendered_with_other_robot_meshes_are_refused(demo_dir, cfg):
    assert read_manifest(demo_dir).env_config["init_params"]["robot_visual_cell"] == cfg.env.train.init_params["robot_visual_cell"]
    full = load_config(CONFIG, ["env.train.init_params.robot_visual_cell=null"])
    with pytest.raises(DemoError, match=rf"^{demo_dir / 'manifest.json'}: demos were rendered with init_params.robot_visual_cell=0.008 "
                                        r"\(null = the full meshes\), the config renders with null; .*robot_visual_cell=0.008$"):
        load_demos_for(full, demo_dir, images=False)


MIXTURE = "maniskill_sft_multitask_tiny"  # PushCube-v1, PickCube-v1, StackCube-v1 at 64 px, no goal in the state


def test_a_mixtures_demos_are_recorded_per_task_and_checked_against_their_own_task(demo_dir, copy_of, cfg):
    mixture = load_config(MIXTURE, skip=("sft_data",), plan=False)
    stack = DemoSpec.from_config(mixture, 2)  # the task's resolved env config: the section's images, cameras and state
    assert (stack.task_id, stack.image_size, stack.params.wrist_camera, stack.params.append_goal_to_state, stack.max_episode_steps,
            stack.instruction) == ("StackCube-v1", (64, 64), "none", False, 40, "stack the red cube on top of the green cube")
    with pytest.raises(ConfigError, match=r"^env.train is a mixture of 3 tasks \(0: PushCube-v1, 1: PickCube-v1, 2: StackCube-v1\); "
                                          r"record each task's demos with --task I$"):
        DemoSpec.from_config(mixture)
    with pytest.raises(ConfigError, match=r"^env.train has no task 3 of 3 tasks"):
        DemoSpec.from_config(mixture, 3)
    with pytest.raises(ConfigError, match=r"^--task 0 chooses a task of a mixture, but env.train is one task; leave --task out$"):
        DemoSpec.from_config(cfg, 0)

    # PickCube demos are checked against the mixture's PickCube task (the policy takes no state there).
    assert check_demos_for(mixture, demo_dir).task_id == "PickCube-v1"
    manifest = copy_of / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"task_id": "PickCube-v1"', '"task_id": "LiftPegUpright-v1"'))
    with pytest.raises(DemoError, match=rf"^{manifest}: demos of LiftPegUpright-v1, but env.train's mixture runs PushCube-v1, "
                                        r"PickCube-v1, StackCube-v1; record them with `embodied-rl demos CONFIG --task I`$"):
        check_demos_for(mixture, copy_of)


def test_missing_and_truncated_files(copy_of):
    h5 = copy_of / "trajectory.h5"
    data = h5.read_bytes()
    h5.write_bytes(data[: len(data) // 2])
    with pytest.raises(DemoError, match=rf"^{h5}: unreadable \(truncated or corrupt HDF5\)"):
        load(copy_of)
    h5.unlink()
    with pytest.raises(DemoError, match=rf"^{h5}: missing$"):
        load(copy_of)
    manifest = copy_of / "manifest.json"
    manifest.write_text(manifest.read_text()[:100])
    with pytest.raises(DemoError, match=rf"^{manifest}: not valid JSON"):
        load(copy_of)
    manifest.unlink()
    with pytest.raises(DemoError, match=rf"^{manifest}: missing"):
        load(copy_of)
    with pytest.raises(DemoError, match="no such demo directory"):
        load(copy_of / "nope")


def test_cli_check_and_refusals_exit_2_with_one_line(demo_dir, tmp_path, capsys):
    assert cli_main(["demos", CONFIG, "--check", str(demo_dir)]) == 0
    assert "3 PickCube-v1 demos" in capsys.readouterr().out

    assert cli_main(["demos", CONFIG, "env.train=maniskill_push_cube", "--check", str(demo_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {demo_dir / 'manifest.json'}: demos have task PickCube-v1, expected PushCube-v1"

    assert cli_main(["demos", CONFIG, "actor.model.num_action_chunks=4", "--check", str(demo_dir)]) == 2
    assert "chunk length (num_action_chunks) 8, expected 4" in capsys.readouterr().err

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    assert cli_main(["demos", CONFIG, "--num-demos", "1", "--out", str(existing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {existing}: already exists") and "\n" not in err
    assert [p.name for p in existing.iterdir()] == ["keep.txt"] and (existing / "keep.txt").read_text() == "mine"

    assert cli_main(["demos", CONFIG, "env.train=maniskill_peg_insertion", "--num-demos", "1", "--out", str(tmp_path / "x")]) == 2
    assert "PegInsertionSide-v1' has no scripted expert" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_recording_repeats_exactly_with_the_same_workers(tmp_path):
    """Two recordings of PushCube (its pushes are contact-rich, where a scene's history shows) with
    two workers hold the same actions and states, episode for episode."""
    def record(name: str) -> h5py.File:
        out = tmp_path / name
        assert cli_main(["demos", "maniskill_sft_tiny", "--num-demos", "8", "--out", str(out), "--workers", "2", "--quiet"]) == 0
        return h5py.File(out / "trajectory.h5", "r")

    a, b = record("a"), record("b")
    assert sorted(a) == sorted(b) and len(a) == 8
    for name in a:
        for key in ("actions", "env_states/actors/cube", "env_states/articulations/panda"):
            assert np.array_equal(a[name][key][()], b[name][key][()]), (name, key)
