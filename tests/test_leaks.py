"""However a run ends, it leaves nothing behind: no shared-memory segments in /dev/shm and no
process of its own (Ray's gcs/raylet/dashboard started for it, its worker processes, their
simulator subprocesses), counted after the CLI process has exited.

The endings here: Ctrl-C (SIGINT to the CLI's whole process group, as a terminal
sends it): exit 130 after the step finished and was saved; a worker SIGKILLed with
`runner.max_restarts=0`: exit 1 with one line that says how to resume; a start that fails inside
a worker (a robot whose assets are not installed, which only the simulator finds): exit 2 with
one line, within seconds rather than a channel timeout. A normal end is checked after the run of
tests/test_recovery.py, which also restarts its workers three times.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from embodied_rl.distributed.shm import SHM_DIR
from embodied_rl.runtime.groups import run_worker_pids
from tests.cli_runs import (
    SESSION,
    left_segments,
    leftovers,
    run_processes,
    small_ppo,
    start_cli,
    wait_for_checkpoint,
)

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("leaks")
    # One worker of each kind: what a run leaves does not depend on how many ranks a group has
    # (tests/test_recovery.py's run, with 2 actor ranks and 2 env workers, checks its normal end).
    (root / "leak.yaml").write_text(small_ppo(root / "runs", root / "tiny-oft", 0, ranks=1))
    return root


def _ctrl_c(proc, run: Path) -> str:
    wait_for_checkpoint(proc, run, 1)
    head = ""
    while not SESSION.search(head):
        head += proc.stdout.readline()
    # The finder sees the live run: its Ray daemons, its workers and their simulator processes.
    alive = "\n".join(run_processes(run.name, SESSION.search(head).group(1)))
    for part in ("gcs_server", "raylet", "ray::EnvWorker", "ray::ActorWorker", "multiprocessing"):
        assert part in alive, f"{part} not among the run's processes:\n{alive}"
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=600)
    out = head + out
    assert proc.returncode == 130, out[-3000:]
    assert (run / "checkpoints" / "global_step_00000002" / "meta.json").is_file(), "the interrupted step was not saved"
    return out


def _killed_worker(proc, run: Path) -> str:
    wait_for_checkpoint(proc, run, 1)
    pids = run_worker_pids(run.name, "EnvWorker")
    assert pids, "no EnvWorker process found"
    os.kill(pids[0], signal.SIGKILL)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: EnvGroup") and "runner.max_restarts=0" in last, last
    assert "runner.resume_dir=latest" in last and "global_step_00000001" in last, last
    assert (run / "error.log").is_file()
    return out


def _failed_start(proc, run: Path) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, out[-3000:]  # a missing asset is the user's to fix: exit 2
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: ManiSkill task PickCube-v1 needs asset anymal_c"), last
    return out


ENDINGS: dict[str, tuple[tuple[str, ...], Callable[..., str]]] = {
    "ctrl_c": ((), _ctrl_c),
    "killed_worker": ((), _killed_worker),
    # A registered robot whose assets are not installed: the config checks pass (they know the
    # robot and its control modes), only the simulator finds the files missing.
    "failed_start": (("+env.train.init_params.robot_uids=anymal_c", "env.train.init_params.control_mode=pd_joint_delta_pos"), _failed_start),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_run_leaves_no_processes_or_shared_memory(workdir: Path, ending: str):
    overrides, finish = ENDINGS[ending]
    shm_before = set(os.listdir(SHM_DIR))
    name = f"leak_{ending}"
    proc = start_cli("train", str(workdir / "leak.yaml"), f"runner.experiment_name={name}", *overrides, cwd=workdir)
    try:
        output = finish(proc, workdir / "runs" / name)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    left, segments = leftovers(name, output, shm_before)
    assert not left, f"processes left after the {ending} ending: {left}"
    assert not segments, f"shared-memory segments left after the {ending} ending: {segments}"


def test_a_segment_counts_as_left_when_it_is_the_runs_or_nobody_holds_it():
    """The rule that lets these tests share the machine: another run's channel segments, and a
    foreign segment a live process holds, are not this run's; a foreign one nobody holds is."""
    foreign = f"erltest-{os.getpid()}"
    path = Path(SHM_DIR) / foreign
    path.write_bytes(b"\0" * 64)
    hold = (f"import mmap, sys; f = open({str(path)!r}, 'r+b'); "
            "m = mmap.mmap(f.fileno(), 0); f.close(); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # mapped only, its file descriptor closed
        new = {foreign, "erl.leak_x-1a2b-obs.0", "erl.other-3c4d-obs.0"}
        assert left_segments("leak_x", new) == ["erl.leak_x-1a2b-obs.0"]
        holder.communicate("", timeout=30)
        assert left_segments("leak_x", new) == ["erl.leak_x-1a2b-obs.0", foreign]
    finally:
        holder.kill()
        path.unlink(missing_ok=True)
