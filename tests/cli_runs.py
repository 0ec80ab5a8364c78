"""Run the real CLI in a subprocess (as a user would) and read what a run wrote."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from embodied_rl.distributed.shm import SHM_DIR
from embodied_rl.runtime.groups import RUN_TAG, RUN_TAG_CHARS
from tests.tiny_runs import tiny_run

#: For a run whose test is not about several ranks or workers: one slot gives one env, rollout and
#: actor worker, half the processes (each imports torch and the simulator or the policy) of the
#: 2-slot default, and a start-up about 20 s shorter on 2 cores.
ONE_SLOT = "cluster.num_cpu_slots=1"
#: ONE_SLOT for a config that places its workers on two slots: every component on slot 0.
ALL_ON_ONE_SLOT = (ONE_SLOT, "cluster.component_placement={actor: 0, env: 0, rollout: 0}")


def small_ppo(out: Path, model: Path, max_restarts: int, ranks: int = 2) -> str:
    """A 3-step PPO run on PickCube at 64 px (`ranks` actor ranks and env workers, 1 rollout
    worker, a checkpoint every step): the run the fault and leak tests interrupt."""
    ranks_slots = "0" if ranks == 1 else f"0-{ranks - 1}"
    return tiny_run(out, model, {
        "cluster": {"component_placement": {"actor": ranks_slots, "env": ranks_slots, "rollout": "0"}},
        "runner": {"max_steps": 3, "save_interval": 1, "max_restarts": max_restarts, "seed": 5},
        "algorithm": {"reward_norm": "running"},
    })


def _cli(args: tuple[str, ...], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = _cli(args, cwd, 1500)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def start_cli(*args: str, cwd: Path) -> subprocess.Popen:
    """The CLI as a background process in a session of its own, as a terminal would run it (a
    Ctrl-C there reaches its whole process group: os.killpg(proc.pid, SIGINT)); output merged."""
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "embodied_rl.cli", *args], cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_checkpoint(proc: subprocess.Popen, run_dir: Path, step: int, timeout_s: float = 600) -> None:
    """Block until the run has saved global step `step` (the next step is then under way)."""
    meta = run_dir / "checkpoints" / f"global_step_{step:08d}" / "meta.json"
    deadline = time.monotonic() + timeout_s
    while not meta.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read() if proc.poll() is not None else ""
            raise AssertionError(f"no checkpoint of step {step} (exit {proc.returncode}):\n{out[-3000:]}")
        time.sleep(0.2)


def run_cli_failing(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI expecting a failure; the caller checks the exit code and the message."""
    proc = _cli(args, cwd, 600)
    assert proc.returncode != 0, f"{args} unexpectedly succeeded:\n{proc.stderr[-3000:]}"
    return proc


# Demo recordings made in this test session, by the arguments of their `embodied-rl demos`
# command: a test asking for the same recording again gets a copy (recording costs a simulator
# start-up and the expert's episodes).
_RECORDED: dict[tuple[str, int, str], Path] = {}


def record_demos(config: str, num_demos: int, out: str, *, cwd: Path, args: tuple[str, ...] = ()) -> None:
    """`embodied-rl demos CONFIG [ARGS] --num-demos N --out OUT --quiet` in cwd, or a copy of the
    same recording made earlier in this session."""
    done = _RECORDED.get((config, *args, num_demos, out))
    if done is not None and done.is_dir():
        shutil.copytree(done, cwd / out)
        return
    run_cli("demos", config, *args, "--num-demos", str(num_demos), "--out", out, "--quiet", cwd=cwd)
    share_demos(config, num_demos, out, cwd=cwd, args=args)


def share_demos(config: str, num_demos: int, out: str, *, cwd: Path, args: tuple[str, ...] = ()) -> None:
    """Offer cwd/out, written by `embodied-rl demos CONFIG [ARGS] --num-demos N --out OUT --quiet`,
    to later record_demos calls with the same arguments."""
    _RECORDED[(config, *args, num_demos, out)] = cwd / out


def read_metrics(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): r for r in rows}


def sidecars(run: Path, mode: str) -> dict[str, list[Path]]:
    """Video step directory -> the JSON sidecars of its videos, for one mode (train or eval)."""
    return {d.name: sorted(d.glob("*.json")) for d in sorted((run / "video" / mode).glob("step_*"))}


def check_environment(run: Path) -> None:
    """The versions behind a run's numbers, as its env workers saw them."""
    (facts,) = json.loads((run / "environment.json").read_text())["env_workers"]
    assert facts["packages"]["mani-skill"] and facts["packages"]["libero"] and facts["render"]["MUJOCO_GL"]


def check_eval_only(run: Path) -> dict:
    """What an `embodied-rl eval` run of a checkpoint writes with a shipped config's scorings
    (the run's algorithm.sampling_params.eval_scoring, the first primary); returns its metrics row."""
    import yaml

    (row,) = read_metrics(run).values()
    scorings = yaml.safe_load((run / "config.yaml").read_text())["algorithm"]["sampling_params"]["eval_scoring"]
    assert 0.0 <= row["eval/success_once"] <= 1.0 and row["eval/num_trajectories"] >= 1
    assert row[f"eval/{scorings[0]}/success_once"] == row["eval/success_once"]
    assert all(row[f"eval/{s}/num_trajectories"] == row["eval/num_trajectories"] for s in scorings)
    assert any(sidecars(run, "eval").values())
    check_environment(run)
    return row


# Frames are compared as means over 16x16-pixel blocks: H.264 rate control makes two encodes of
# the same picture differ by a few levels per pixel (largest block difference measured: 3 of
# 255), while a gripper in another place moves whole blocks (measured: 60-100 after two chunks).
BLOCK, SAME_PICTURE, MOVED = 16, 10.0, 30.0


def eval_recordings(run: Path) -> dict[str, tuple[list[int], Any]]:
    """Eval video tag -> (reset ids of its episodes, decoded frames float32 [T, H, W, 3])."""
    import imageio.v3 as iio
    import numpy as np

    out = {}
    for video in sorted((run / "video" / "eval").rglob("*.mp4")):
        side = json.loads(video.with_suffix(".json").read_text())
        reset_ids = [e["reset_id"] for e in sorted(side["episodes"], key=lambda e: e["env_index"])]
        out[video.stem] = (reset_ids, iio.imread(video).astype(np.float32))
    return out


def block_diff(a, b) -> float:
    """Largest difference between the BLOCK x BLOCK means of two frames [H, W, 3]."""
    h, w = a.shape[0] // BLOCK * BLOCK, a.shape[1] // BLOCK * BLOCK
    means = [x[:h, :w].reshape(h // BLOCK, BLOCK, w // BLOCK, BLOCK, 3).mean(axis=(1, 3)) for x in (a, b)]
    return float(abs(means[0] - means[1]).max())


# ----------------------------------------------------------------------------- what a run leaves

SETTLE_S = 20.0  # Ray's daemons exit asynchronously after ray.shutdown()
SESSION = re.compile(r"ray session: (\S+)")


def _processes() -> dict[int, tuple[int, str, list[bytes]]]:
    """pid -> (parent pid, command line, environment) of every live, non-zombie process."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            out[int(proc.name)] = (int(fields[1]), cmdline, environ)
    return out


def run_processes(run_name: str, session_dir: str) -> list[str]:
    """Processes of one run: its workers (they carry the run tag, and so do their simulator
    subprocesses), its Ray daemons (their command lines name the run's session directory) and
    whatever those started (Ray's agents retitle themselves)."""
    tag = f"{RUN_TAG}={run_name[:RUN_TAG_CHARS]}-".encode()
    procs = _processes()
    ours = {pid for pid, (_, cmd, env) in procs.items()
            if any(e.startswith(tag) for e in env) or (session_dir and session_dir in cmd)}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _) in procs.items() if ppid in ours} - ours
        ours |= children
        grew = bool(children)
    return [f"{pid}: {procs[pid][1][:120]}" for pid in sorted(ours)]


def open_segments() -> set[str]:
    """Names of the /dev/shm segments some live process holds open or mapped."""
    held = set()
    prefix = SHM_DIR.rstrip("/") + "/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(prefix):
                    held.add(target[len(prefix):].removesuffix(" (deleted)"))
            for line in (proc / "maps").read_text().splitlines():
                _, sep, path = line.partition(prefix)
                if sep:
                    held.add(path.removesuffix(" (deleted)"))
        except OSError:  # the process exited, or is not ours to read
            continue
    return held


def left_segments(run_name: str, new: set[str]) -> list[str]:
    """Of the segments `new` since a run started, those the run left (see leftovers)."""
    foreign = {n for n in new if not n.startswith("erl.")}
    unheld = foreign - open_segments() if foreign else set()
    return sorted({n for n in new if n.startswith(f"erl.{run_name[:RUN_TAG_CHARS]}-")} | unheld)


def leftovers(run_name: str, output: str, shm_before: set[str]) -> tuple[list[str], list[str]]:
    """(processes of the run still alive, shared-memory segments it left), after a settling time.

    A segment counts as left by the run if it is new since `shm_before` and either carries the
    run's channel prefix, or has no prefix of ours and no live process holds it (a segment that
    nobody holds is a leak, whoever made it). The channel segments of other runs, and foreign
    segments that a live process holds (another test's run beside this one), are theirs: the
    check needs no machine to itself."""
    session = SESSION.search(output)
    assert session, "the run did not report its Ray session"
    deadline = time.monotonic() + SETTLE_S
    while True:
        left = run_processes(run_name, session.group(1))
        segments = left_segments(run_name, set(os.listdir(SHM_DIR)) - shm_before)
        if (not left and not segments) or time.monotonic() > deadline:
            return left, segments
        time.sleep(0.5)
