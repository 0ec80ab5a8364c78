"""Helpers for the review tests: a fixture run recorded by the real recorder, Chromium, the CLI server.

The run is recorded by `embodied_rl.envs.video.VideoRecorder` (the one training uses) from
synthetic frames, so it is byte-for-byte the format the review page gets from real training
without paying for a simulator start in these tests.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from embodied_rl.evaluation.intervals import wilson_interval

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TASKS = [("PickCube-v1", "pick up the red cube"), ("PushCube-v1", "push the cube <b>to</b> the goal")]
FRAMES = 24  # per video; episodes of 8-16 frames at 10 fps
CUT_EPISODE_STEPS = 8  # the auto-reset video's episodes


def _record(run: Path, mode: str, step: int, success_env0: bool) -> None:
    """One video of 2 sub-envs: env 0 (PickCube) runs two episodes, env 1 (PushCube) fails one."""
    from embodied_rl.envs.video import VideoRecorder
    from embodied_rl.types import EnvObservation, EpisodeSummary

    rec = VideoRecorder(str(run / "video" / mode), fps=10, info_on_video=True, tag="worker0_stage0",
                        simulator="maniskill", env_worker=0, stage=0)
    rec.begin(step, step, mode, run.name)
    for i, (task, text) in enumerate(TASKS):
        rec.episode_start(i, task, text, reset_id=10 * step + i)
    returns, lengths = np.zeros(2), np.zeros(2, int)
    for t in range(FRAMES):
        images = np.zeros((2, 64, 64, 3), np.uint8)
        images[0, :, :, 0] = 40 + 8 * t  # a changing picture, so playback visibly moves
        images[1, :, :, 2] = 40 + 8 * t
        images[:, 20 + t:30 + t, 25:35] = 255
        success = np.array([success_env0 and t == 7, False])
        rewards = success.astype(np.float32) + 0.1
        returns += rewards
        lengths += 1
        rec.add_frame(EnvObservation(images, np.zeros((2, 4), np.float32), [x[1] for x in TASKS]),
                      rewards, success, lengths.copy())
        if t == 7:  # env 0 ends its first episode and auto-resets
            rec.episode_end(EpisodeSummary(0, TASKS[0][0], TASKS[0][1], 10 * step, float(returns[0]),
                                           8, success_env0, success_env0))
            rec.episode_start(0, TASKS[0][0], TASKS[0][1], reset_id=10 * step + 2)
            returns[0], lengths[0] = 0, 0
    rec.episode_end(EpisodeSummary(1, TASKS[1][0], TASKS[1][1], 10 * step + 1, float(returns[1]),
                                   FRAMES, False, False))
    rec.end()


def _record_cut_at_start(run: Path, step: int) -> None:
    """A video as every default training run records it (auto_reset, episodes as long as the
    rollout): both envs' episodes end at the last chunk boundary, auto-reset, and the video ends
    on the new episodes' first frame. Recorder calls in ChunkedVectorEnv's order."""
    from embodied_rl.envs.video import VideoRecorder
    from embodied_rl.types import EnvObservation, EpisodeSummary

    task, text = TASKS[0]
    rec = VideoRecorder(str(run / "video" / "train"), fps=10, info_on_video=True, tag="worker1_stage0",
                        simulator="maniskill", env_worker=1, stage=0)
    rec.begin(step, step, "train", run.name)

    def frame(t: int, steps: np.ndarray, reward: float) -> None:
        images = np.zeros((2, 64, 64, 3), np.uint8)
        images[:, :, :, 1] = 40 + 16 * t
        obs = EnvObservation(images, np.zeros((2, 4), np.float32), [text] * 2)
        rec.add_frame(obs, np.full(2, reward, np.float32), np.zeros(2, bool), steps.copy())

    for i in range(2):
        rec.episode_start(i, task, text, reset_id=100 * step + i)
    steps = np.zeros(2, int)
    frame(0, steps, 0.0)  # the reset frame
    for t in range(1, CUT_EPISODE_STEPS + 1):  # two chunks of 4 actions
        steps += 1
        frame(t, steps, 0.1)
    for i in range(2):
        rec.episode_end(EpisodeSummary(i, task, text, 100 * step + i, 0.1 * CUT_EPISODE_STEPS,
                                       CUT_EPISODE_STEPS, False, False))
        rec.episode_start(i, task, text, reset_id=100 * step + 2 + i)
    frame(CUT_EPISODE_STEPS + 1, np.zeros(2, int), 0.0)  # the new episodes' first frame, then the rollout ends
    rec.end()


def make_fixture_run(base: Path) -> Path:
    """runs/fixture_exp with train videos at steps 1 and 2 (plus, at step 2, one whose two
    episodes auto-reset at the rollout end: two cut-at-start stubs), an eval video at step 2, a
    video whose sidecar is missing, one whose sidecar is corrupt, metrics.jsonl and config.yaml."""
    run = base / "runs" / "fixture_exp"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("runner:\n  experiment_name: fixture_exp\n")
    _record(run, "train", 1, success_env0=False)
    _record(run, "train", 2, success_env0=True)
    _record_cut_at_start(run, 2)
    _record(run, "eval", 2, success_env0=True)
    broken = run / "video" / "train" / "step_000003"
    broken.mkdir(parents=True)
    for tag in ("no_sidecar", "corrupt_sidecar"):
        src = run / "video" / "train" / "step_000001" / "worker0_stage0.mp4"
        (broken / f"{tag}.mp4").write_bytes(src.read_bytes())
    (broken / "corrupt_sidecar.json").write_text('{"schema_version": 1, "episodes": [')
    lines = [{"step": s, "env/success_once": s / 4, "env/return": 0.5 * s, "time/step": 1.0} for s in (1, 2, 3)]
    lines.append({"step": 2, "eval/env/success_once": 1.0, "eval/env/return": 1.9})
    low, high = wilson_interval(4, 8)  # an evaluation as the runner logs it: 4 of 8 episodes
    lines.append({"step": 2, "eval/success_once": 0.5, "eval/num_trajectories": 8.0,
                  "eval/success_once_ci95_low": low, "eval/success_once_ci95_high": high})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return run


def make_scored_run(base: Path) -> Path:
    """runs/scored_exp: evaluations at steps 0 and 4 logged as the runner logs them with both
    scorings (greedy primary): eval/greedy/*, eval/sampled/* (each with intervals and a per-task
    copy), and the primary's eval/* copy. No videos."""
    run = base / "runs" / "scored_exp"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("runner:\n  experiment_name: scored_exp\n")
    lines = []
    for step, counts in ((0, {"greedy": 2, "sampled": 3}), (4, {"greedy": 5, "sampled": 4})):
        row = {"step": step}
        for scoring, k in counts.items():
            low, high = wilson_interval(k, 8)
            for suffix in ("", "/PushCube-v1"):
                row.update({f"eval/{scoring}/success_once{suffix}": k / 8, f"eval/{scoring}/num_trajectories{suffix}": 8.0,
                            f"eval/{scoring}/success_once_ci95_low{suffix}": low,
                            f"eval/{scoring}/success_once_ci95_high{suffix}": high, f"eval/{scoring}/return{suffix}": k / 4})
        row.update({"eval/" + key.removeprefix("eval/greedy/"): v for key, v in list(row.items()) if key.startswith("eval/greedy/")})
        lines.append(row)
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return run


HEALTH_ALARM = {"event": "alarm", "kind": "kl_spike", "metric": "train/actor/approx_kl", "step": 1, "value": 8.7,
                "threshold": 1.0, "onset": 1, "action": "rollback", "above": True, "hint": "", "detail": ""}
HEALTH_WARNING = {"event": "alarm", "kind": "grad_spike", "metric": "train/actor/grad_norm", "step": 3, "value": 41.5,
                  "threshold": 20.0, "onset": 3, "action": "warn", "above": True, "hint": "", "detail": ""}


def make_health_run(base: Path, name: str = "health_exp") -> Path:
    """runs/<name> as the runtime leaves a run whose step 1 fired a kl_spike alarm (action
    rollback): rolled back to step 0 with the learning rates lowered, repeated steps 1-4 (the
    metrics rows rewritten), best evaluation at step 2 (checkpoints/best), a grad_spike warning
    at step 3. No videos."""
    run = base / "runs" / name
    (run / "checkpoints" / "best").mkdir(parents=True)
    (run / "config.yaml").write_text(f"runner:\n  experiment_name: {name}\n")
    rows = [{"step": 0, "eval/success_once": 0.125}]
    for step in range(1, 5):
        alarms = 1.0 if step == 3 else 0.0
        rows.append({"step": step, "env/success_once": 0.1 * step, "env/return": 0.2 * step,
                     "train/actor/approx_kl": 0.05, "health/alarms": alarms, **({"health/grad_spike": 1.0} if alarms else {})})
    rows.append({"step": 2, "eval/success_once": 0.25})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    events = [HEALTH_ALARM, {"event": "rollback", "from_step": 1, "to_step": 0, "rollback": 1, "lr_scale": 0.5},
              {"event": "best", "step": 2, "eval/success_once": 0.25}, HEALTH_WARNING]
    (run / "health.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "checkpoints" / "best" / "best.json").write_text(
        json.dumps({"global_step": 2, "eval/success_once": 0.25, "checkpoint": "global_step_2"}) + "\n")
    return run


def make_clean_run(base: Path) -> Path:
    """runs/clean_exp: metrics of a monitored run (health/alarms logged, always 0), no health.jsonl."""
    run = base / "runs" / "clean_exp"
    run.mkdir(parents=True)
    rows = [{"step": s, "env/success_once": 0.2 * s, "health/alarms": 0.0} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def make_run_with_escape_links(base: Path) -> Path:
    """The fixture run plus symlinks inside it pointing outside it (the server must refuse them)."""
    run = make_fixture_run(base)
    outside = base / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.json").write_text('{"secret": "TOPSECRET"}')
    step = run / "video" / "train" / "step_000001"
    os.symlink(outside / "secret.json", step / "evil.json")
    os.symlink(outside, run / "video" / "train" / "step_000009")
    return run


def start_cli_server(run_dirs: list[Path], *extra: str) -> tuple[subprocess.Popen, str]:
    """`python -m embodied_rl.review RUN... --port 0`; returns the process and the URL it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied_rl.review", *map(str, run_dirs), "--port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = re.search(r"Open (http://\S+/)", line)
        if match:
            return proc, match.group(1)
    proc.wait()
    raise RuntimeError("review server did not start:\n" + "".join(lines))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def launch_chromium(playwright, user_data_dir: Path):
    """Debian's Chromium, headless, fresh profile (no network services)."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium); "
                           "the test set-up does this")
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
        viewport={"width": 1400, "height": 900})
