"""End-to-end runs of the real system through the CLI: train, exact resume, eval-only.

Real ManiSkill (CPU render, 64 px), the real tiny OpenVLA-OFT, real Ray workers and a real
FSDP2 actor over gloo: 2 env workers x 2 envs, 1 rollout worker, actor world size 2,
pipeline_stage_num 2. Three runs share one tiny model:
  A: 2 PPO steps (checkpoint every step)          -> metrics, checkpoints and videos written
  B: resume A's step-1 checkpoint, to step 2       -> exact resume: B's step 2 == A's step 2
  D: eval-only from A's checkpoint                  -> success reported, weights never updated;
                                                       greedy and sampled scorings
  E: eval-only without a checkpoint, greedy only    -> D acts differently: runner.ckpt_path matters
  F: eval --compare of A's checkpoint with itself   -> identical paired episodes, b = c = 0, p = 1
The eval-only runs D, E and F check what an evaluation does with a checkpoint, not how many
workers run it: they run on one slot (ALL_ON_ONE_SLOT), one env worker with the 4 eval sub-envs
and the rollout worker (an eval-only run starts no actor).
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import imageio.v3 as iio
import pytest

from tests.cli_runs import (
    ALL_ON_ONE_SLOT,
    MOVED,
    SAME_PICTURE,
    block_diff,
    eval_recordings,
    read_metrics,
    run_cli,
    run_cli_failing,
)
from tests.tiny_runs import EVAL_64, tiny_run

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]


def config(out: Path, model: Path) -> str:
    videos = "${runner.logger.log_path}/video"
    return tiny_run(out, model, {
        "cluster": {"component_placement": {"actor": "0-1", "env": "0-1", "rollout": "0"}},
        "runner": {"experiment_name": "e2e", "save_interval": 1, "seed": 7,
                   "logger": {"logger_backends": ["console", "tensorboard"]}},
        "env": {"train": {"video_cfg": {"save_video": True, "video_base_dir": f"{videos}/train"}},
                "eval": {**EVAL_64, "total_num_envs": 4, "auto_reset": False, "ignore_terminations": True,
                         "use_fixed_reset_state_ids": True,
                         "video_cfg": {"save_video": True, "video_base_dir": f"{videos}/eval"}}},
        "rollout": {"pipeline_stage_num": 2},
        # A large lr, so that two steps move the greedy actions (the eval tests compare them).
        "actor": {"optim": {"lr": 1.0e-2}},
    })


def learning_metrics(row: dict) -> dict:
    """Everything but wall-clock figures and transport counters, which differ between runs by nature."""
    return {k: v for k, v in row.items() if k != "time" and not k.startswith(("time/", "channel/"))}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("e2e")
    (root / "configs").mkdir()
    (root / "configs" / "e2e.yaml").write_text(config(root / "runs", root / "tiny-oft"))
    return root


@pytest.fixture(scope="module")
def run_a(workdir: Path) -> Path:
    run_cli("train", str(workdir / "configs" / "e2e.yaml"), "runner.experiment_name=a", cwd=workdir)
    return workdir / "runs" / "a"


def test_driver_carries_no_rollout_data_or_weights(run_a: Path):
    """Trajectories and weights go between workers; the driver sees references and metrics."""
    for step, row in read_metrics(run_a).items():
        observations = sum(v for k, v in row.items() if k.startswith("channel/") and k.endswith("_bytes"))
        assert row["driver/bytes_received"] < 64 * 1024 and row["driver/bytes_sent"] < 16 * 1024, (step, row)
        assert observations > 10 * row["driver/bytes_received"], (step, observations)


def test_train_two_steps_writes_metrics_checkpoint_and_videos(run_a: Path):
    metrics = read_metrics(run_a)
    assert sorted(metrics) == [1, 2]
    for row in metrics.values():
        assert math.isfinite(row["train/actor/total_loss"]) and math.isfinite(row["train/critic/value_loss"])
        assert row["env/num_trajectories"] > 0
    assert (run_a / "config.yaml").is_file()
    latest = (run_a / "checkpoints" / "latest").read_text().strip()
    assert latest == "global_step_00000002"
    assert (run_a / "checkpoints" / latest / "actor" / "dcp" / ".metadata").is_file()  # sharded, every actor rank wrote
    videos = sorted((run_a / "video" / "train").rglob("*.mp4"))
    assert len(videos) == 2 * 2 * 2  # steps x env workers x stages
    sidecar = json.loads(videos[0].with_suffix(".json").read_text())
    assert sidecar["episodes"] and sidecar["mode"] == "train"
    frames = iio.imread(videos[0])
    assert frames.shape[0] == sidecar["num_frames"] >= 16 and frames.dtype.name == "uint8"


def test_resume_matches_uninterrupted_run(workdir: Path, run_a: Path):
    run_cli("train", str(workdir / "configs" / "e2e.yaml"), "runner.experiment_name=b",
            f"runner.resume_dir={run_a / 'checkpoints' / 'global_step_00000001'}", cwd=workdir)
    a, b = read_metrics(run_a), read_metrics(workdir / "runs" / "b")
    assert sorted(b) == [2]
    assert learning_metrics(b[2]) == learning_metrics(a[2])


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run_d(workdir: Path, run_a: Path) -> tuple[Path, str, str]:
    """Eval-only of A's checkpoint; returns the run and digests of the watched weights before/after."""
    ckpt = run_a / "checkpoints" / "global_step_00000002"
    watched = [p for p in [*ckpt.rglob("*"), *(workdir / "tiny-oft").rglob("*")] if p.is_file()]
    before = _digest(watched)
    run_cli("eval", str(workdir / "configs" / "e2e.yaml"), *ALL_ON_ONE_SLOT, "runner.experiment_name=d", f"runner.ckpt_path={ckpt}",
            cwd=workdir)
    return workdir / "runs" / "d", before, _digest(watched)


def test_eval_only_reports_success_and_never_updates_weights(run_d: tuple[Path, str, str]):
    run_d, before, after = run_d
    assert after == before
    row = read_metrics(run_d)[0]
    assert row["eval/num_trajectories"] == 4
    assert 0.0 <= row["eval/success_once"] <= 1.0
    assert any(k.startswith("eval/success_once/") for k in row), "per-task success metrics"
    # Both scorings (the shipped default), each with its interval; the primary (greedy) is also eval/*.
    for scoring in ("greedy", "sampled"):
        assert row[f"eval/{scoring}/num_trajectories"] == 4
        assert row[f"eval/{scoring}/success_once_ci95_low"] <= row[f"eval/{scoring}/success_once"] <= row[f"eval/{scoring}/success_once_ci95_high"]
        assert any(k.startswith(f"eval/{scoring}/success_once/") for k in row)
    assert {k.removeprefix("eval/greedy/"): v for k, v in row.items() if k.startswith("eval/greedy/")} == \
        {k.removeprefix("eval/"): v for k, v in row.items() if k.startswith("eval/") and k.split("/")[1] not in ("greedy", "sampled")}
    assert not (run_d / "checkpoints").exists()
    assert sorted((run_d / "video" / "eval").rglob("*.mp4"))


def test_eval_ckpt_path_changes_the_actions_taken(workdir: Path, run_d: tuple[Path, str, str]):
    """Greedy evals of the same config on the same reset ids, with A's checkpoint (D) and without (E):
    the same first frame, then the robot ends up elsewhere. An ignored ckpt_path would make them equal.
    E scores greedily only: videos record the primary (greedy) scoring alone."""
    run_cli("eval", str(workdir / "configs" / "e2e.yaml"), *ALL_ON_ONE_SLOT, "runner.experiment_name=e",
            "algorithm.sampling_params.eval_scoring=[greedy]", cwd=workdir)
    with_ckpt, without = eval_recordings(run_d[0]), eval_recordings(workdir / "runs" / "e")
    assert sorted(with_ckpt) == sorted(without) and with_ckpt
    moved = []
    for tag, (ids_d, frames_d) in with_ckpt.items():
        ids_e, frames_e = without[tag]
        assert ids_d == ids_e and frames_d.shape == frames_e.shape, tag
        assert block_diff(frames_d[0], frames_e[0]) < SAME_PICTURE, tag
        moved.append(max(block_diff(x, y) for x, y in zip(frames_d[1:], frames_e[1:])))
    assert max(moved) > MOVED, moved


def test_compare_checkpoint_with_itself_pairs_identical_episodes(workdir: Path, run_a: Path):
    """F: --compare A's checkpoint (as a run directory and as its step directory) with itself, with
    dense rewards so returns show the actions: every paired episode is the same for A and B, in
    both scorings (sampling is seeded per eval epoch, not by what ran before), while sampled and
    greedy act differently."""
    step = run_a / "checkpoints" / "global_step_00000002"
    proc = run_cli("eval", str(workdir / "configs" / "e2e.yaml"), *ALL_ON_ONE_SLOT, "runner.experiment_name=f",
                   "--compare", str(run_a), str(step),
                   "env.eval.init_params.reward_mode=dense", cwd=workdir)
    report = json.loads((workdir / "runs" / "f" / "comparison.json").read_text())
    assert report["scorings"] == ["greedy", "sampled"] and {p["kind"] for p in report["policies"].values()} == {"checkpoint"}
    episodes = report["episodes"]
    assert len(episodes) == 4 and len({e["reset_id"] for e in episodes}) == 4
    for scoring in ("greedy", "sampled"):
        r = report["results"][scoring]
        assert (r["n"], r["only_a"], r["only_b"], r["mcnemar_p"]) == (4, 0, 0, 1.0)
        assert r["A"] == r["B"] and r["A"]["successes"] == sum(e["A"][scoring]["success_once"] for e in episodes)
        assert all(e["A"][scoring] == e["B"][scoring] for e in episodes)
    assert [e["A"]["greedy"]["return"] for e in episodes] != [e["A"]["sampled"]["return"] for e in episodes]
    assert "exact McNemar p = 1" in proc.stdout and "A - B: +0.0 points" in proc.stdout
    # Each policy's eval videos under a step of its own (A 0, B 1), for the review page.
    assert [Path(report["videos"][side]).name for side in "AB"] == ["step_000000", "step_000001"]
    assert all(sorted(Path(report["videos"][side]).glob("*.mp4")) for side in "AB")


def test_export_cli_writes_a_plain_model_with_the_trained_weights(workdir: Path, run_a: Path):
    import torch

    from embodied_rl.models import build_policy
    from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
    from embodied_rl.workers.actor.checkpoint import read_trainable_weights

    out = workdir / "exported"
    run_cli("export", str(run_a), str(out), cwd=workdir)  # a run directory = its newest checkpoint
    assert (out / "config.json").is_file() and (out / "dataset_statistics.json").is_file()
    trained = read_trainable_weights(run_a / "checkpoints" / "global_step_00000002" / "actor")
    policy = build_policy(OpenVLAOFTConfig(model_path=str(out), add_value_head=True, value_type="chunk_level"),
                          device="cpu", dtype=torch.float32)
    exported = policy.trainable_state_dict()
    assert sorted(exported) == sorted(trained)
    assert all(torch.equal(exported[k], trained[k].float()) for k in trained)

    proc = run_cli_failing("export", str(run_a), str(out), cwd=workdir)  # out is not empty now
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "OUT_DIR" in proc.stderr
