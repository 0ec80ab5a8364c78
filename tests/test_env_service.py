"""Env servers (embodied_rl/envs/service): the handshake's errors, and a served ManiSkill backend
that loses its server (killed, or hung) mid-step and goes on.

The protocol tests run real servers: `serve` of server.py in a thread of this process with another
protocol version, and interpreters that are not servers (a script that exits, one that sleeps).
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Listener
from pathlib import Path

import numpy as np
import pytest

from embodied_rl.config.schema.env import EnvConfig, ServerConfig, SubprocConfig
from embodied_rl.distributed.shm import list_segments
from embodied_rl.envs import make_env
from embodied_rl.envs.service import shared_images
from embodied_rl.envs.service.client import ServedBackend
from embodied_rl.envs.service.link import RemoteServer
from embodied_rl.envs.service.protocol import KEY_ENV, PROTOCOL_VERSION
from embodied_rl.envs.service.server import serve
from embodied_rl.envs.service.shared_images import (
    ImageReceiver,
    ImageShipper,
    new_prefix,
)
from embodied_rl.errors import ConfigError

PUSH_CUBE = {"id": "PushCube-v1", "camera_heights": 64, "camera_widths": 64}


def cfg(server: ServerConfig, **subproc) -> EnvConfig:
    return EnvConfig(env_type="maniskill", task_description="push the cube", init_params=dict(PUSH_CUBE), max_episode_steps=50,
                     server=server, subproc=SubprocConfig(**subproc))


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_server_of_another_protocol_version_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key")
    with Listener(("127.0.0.1", 0), authkey=b"test-key") as listener:
        port = listener.address[1]
        thread = threading.Thread(target=serve, args=(listener,), kwargs={"once": True, "version": PROTOCOL_VERSION + 1}, daemon=True)
        thread.start()
        with pytest.raises(ConfigError) as err:
            ServedBackend(cfg(ServerConfig(address=f"127.0.0.1:{port}")), 1, seed=0, key="env.train")
        thread.join(timeout=10)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"env.train.server: env server 127.0.0.1:{port}: the env server speaks protocol version "
                          f"{PROTOCOL_VERSION + 1}, the env worker {PROTOCOL_VERSION}")
    assert "run the same embodied_rl version on both sides" in msg


def test_a_server_started_with_another_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "wrong-key")
    with Listener(("127.0.0.1", 0), authkey=b"test-key") as listener:
        port = listener.address[1]
        thread = threading.Thread(target=lambda: pytest.raises(AuthenticationError, serve, listener, once=True), daemon=True)
        thread.start()
        with pytest.raises(ConfigError, match=f"env.train.server.address=127.0.0.1:{port}: .*set the same {KEY_ENV} on the server and the trainer"):
            ServedBackend(cfg(ServerConfig(address=f"127.0.0.1:{port}")), 1, seed=0, key="env.train")
        thread.join(timeout=10)


def test_an_interpreter_that_does_not_start_a_server(tmp_path: Path) -> None:
    python = script(tmp_path, "echo 'No module named embodied_rl' >&2; exit 3")
    with pytest.raises(ConfigError) as err:
        ServedBackend(cfg(ServerConfig(python=python)), 1, seed=0, key="env.train")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"env.train.server: env server {python} exited with code 3 before listening: No module named embodied_rl;")
    with pytest.raises(ConfigError, match=f"env.train.server.python={tmp_path}/none: cannot run it"):
        ServedBackend(cfg(ServerConfig(python=str(tmp_path / "none"))), 1, seed=0, key="env.train")


def test_a_server_that_never_listens_times_out(tmp_path: Path) -> None:
    python = script(tmp_path, "echo $$ > \"$(dirname \"$0\")/pid\"; exec sleep 60")
    with pytest.raises(ConfigError) as err:
        ServedBackend(cfg(ServerConfig(python=python), start_timeout_s=1.0), 1, seed=0, key="env.eval")
    assert str(err.value).startswith(f"env.eval.server: env server {python} did not listen within 1 s; raise env.eval.subproc.start_timeout_s")
    pid = int((tmp_path / "pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()  # killed, not left behind


@pytest.mark.slow
@pytest.mark.maniskill
def test_a_server_killed_or_hung_mid_step_is_restarted_and_its_episodes_fail(caplog: pytest.LogCaptureFixture,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """One served PushCube sub-env: SIGKILL, then SIGSTOP (a hang past step_timeout_s), each during
    a chunk: the episode in flight ends failed, the server is started again and the env steps on;
    with max_restarts=0 the next loss stops the rollout. Its images (12 KiB) take shared memory
    here, as those of larger batches do."""
    monkeypatch.setattr(shared_images, "SHM_MIN_BYTES", 0)
    env = make_env(cfg(ServerConfig(python=sys.executable), step_timeout_s=5.0), 1)
    try:
        backend = env.backend
        assert isinstance(backend, ServedBackend) and env.reset_id_space == range(2**30)
        env.reset()
        actions = np.zeros((1, 4, 7), np.float32)
        assert not env.chunk_step(actions).episodes
        for fault in (signal.SIGKILL, signal.SIGSTOP):
            pid = backend.link.proc.pid
            os.kill(pid, fault)
            result = env.chunk_step(actions)
            (episode,) = result.episodes
            assert episode.failed and not episode.success_once and result.terminations[0, 0] and not result.active_mask[0, 1:].any()
            assert backend.link.proc.pid != pid
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
            env.reset()
            assert not env.chunk_step(actions).episodes  # the new server steps
        assert backend.num_restarts == 2
        assert "restarting it, its episodes in flight count as failed" in caplog.text
        # the killed server could not unlink its image segments: the restart swept them
        assert len(list_segments(backend._images.prefix)) == 1
        backend.opts = dataclasses.replace(backend.opts, max_restarts=0)
        os.kill(backend.link.proc.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"env server .* \(env\) failed 1 times in a row, last during step: connection lost"):
            env.chunk_step(actions)
    finally:
        env.close()
    assert not list_segments(backend._images.prefix)


@pytest.mark.slow
@pytest.mark.maniskill
def test_a_served_env_steps_as_the_same_env_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same reset ids, same actions: the same observations (images of lazily rendered chunks
    included, through shared memory), rewards, flags and episodes served as in-process."""
    monkeypatch.setattr(shared_images, "SHM_MIN_BYTES", 0)
    results = []
    for server in (None, ServerConfig(python=sys.executable)):
        env = make_env(dataclasses.replace(cfg(server), max_episode_steps=12), 1)
        try:
            rng = np.random.default_rng(0)
            trace = [env.reset()]
            for _ in range(3):  # 3 x 4 steps: the episode's last chunk
                r = env.chunk_step(rng.uniform(-1, 1, (1, 4, 7)).astype(np.float32))
                trace.append((r.obs, r.rewards, r.terminations, r.truncations, [dataclasses.astuple(e) for e in r.episodes]))
            results.append(trace)
            if server is not None:  # a spawned server is on this host: its images came through shared memory
                prefix = env.backend._images.prefix
                assert list_segments(prefix)
        finally:
            env.close()
    assert not list_segments(prefix)
    local, served = results
    assert np.array_equal(local[0].main_images, served[0].main_images)
    for a, b in zip(local[1:], served[1:]):
        assert np.array_equal(a[0].main_images, b[0].main_images) and np.array_equal(a[0].states, b[0].states)
        assert all(np.array_equal(x, y) for x, y in zip(a[1:4], b[1:4])) and a[4] == b[4]
    assert local[-1][4], "the episode ran to its end in both"


def test_a_server_started_by_hand_through_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """`embodied-rl env-server --listen HOST:PORT`: refuses to start without a key or with a bad
    address (one line, exit 2), else answers the handshake of an env worker holding the key."""
    cli = [sys.executable, "-m", "embodied_rl.cli", "env-server", "--listen"]
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    for args, extra, expected in ((["127.0.0.1:0"], {}, f"error: embodied-rl env-server needs the connection key in {KEY_ENV}"),
                                  (["nohost"], {KEY_ENV: "k"}, "error: env-server --listen: expected HOST:PORT")):
        proc = subprocess.run([*cli, *args], env=env | extra, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(expected), proc.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([*cli, f"127.0.0.1:{port}"], env=env | {KEY_ENV: "test-key"}, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on" in server.stderr.readline()
        monkeypatch.setenv(KEY_ENV, "test-key")
        link = RemoteServer(f"127.0.0.1:{port}", "env.train")
        conn, info = link.start(30.0)
        assert info.version == PROTOCOL_VERSION and info.pid == server.pid
        conn.close()
    finally:
        server.kill()
        server.wait(timeout=30)


def test_a_mixture_task_sets_its_own_server() -> None:
    """`server` is a task key: one task of a mixture served, the other in-process; a bad one names its task."""
    from embodied_rl.configure import load_config
    from embodied_rl.distributed.resources import Resources

    tasks = f"env.train.tasks=[{{config: maniskill_push_cube}}, {{config: maniskill_pick_cube, server: {{python: {sys.executable}}}}}]"
    cfg = load_config("maniskill_ppo_multitask_tiny", [tasks], resources=Resources(1, 2, "cpu"))
    push, pick = cfg.env.train.tasks
    assert push.server is None and pick.server == ServerConfig(python=sys.executable)
    with pytest.raises(ConfigError, match=r"env.train.tasks\[1\].server.python=/nowhere does not exist"):
        load_config("maniskill_ppo_multitask_tiny", [tasks.replace(sys.executable, "/nowhere")], resources=Resources(1, 2, "cpu"))


def test_observation_images_round_trip_through_shared_memory() -> None:
    """What a spawned server sends in place of the images (a small descriptor, no array), and what
    the env worker gets back: equal private arrays; a step without images passes as it is."""
    import pickle

    from embodied_rl.types import EnvObservation

    rng = np.random.default_rng(0)
    obs = EnvObservation(main_images=rng.integers(0, 255, (3, 64, 64, 3), dtype=np.uint8), states=rng.normal(size=(3, 9)).astype(np.float32),
                         task_descriptions=["a", "b", "c"], wrist_images=rng.integers(0, 255, (3, 32, 32, 3), dtype=np.uint8))
    prefix = new_prefix()
    shipper, receiver = ImageShipper(prefix, min_bytes=0), ImageReceiver(prefix)
    try:
        small = ImageShipper(prefix + "small.", min_bytes=obs.main_images.nbytes + obs.wrist_images.nbytes + 1)
        assert small.ship(obs) is obs  # below the size where shared memory pays: pickled as it is
        small.close()
        for sent in (obs, dataclasses.replace(obs, wrist_images=None)):
            wire = pickle.dumps(shipper.ship(sent))
            assert len(wire) < 4096
            got = receiver.receive(pickle.loads(wire))
            assert np.array_equal(got.main_images, sent.main_images) and np.array_equal(got.states, sent.states)
            assert (got.wrist_images is None) == (sent.wrist_images is None)
            if sent.wrist_images is not None:
                assert np.array_equal(got.wrist_images, sent.wrist_images)
            got.main_images[0] = 0  # private: the server's next reply reuses the segment
        assert len(list_segments(prefix)) == 1
        blank = dataclasses.replace(obs, main_images=None, wrist_images=None)
        assert receiver.receive(shipper.ship(blank)) == blank
    finally:
        shipper.close()
        receiver.sweep()
    assert not list_segments(prefix)


@pytest.mark.slow
@pytest.mark.maniskill
def test_a_served_env_whose_env_worker_is_killed_leaves_no_shared_memory(tmp_path: Path) -> None:
    """An env worker killed outright cannot sweep: its spawned server unlinks its image segments as it
    exits with it."""
    code = ("import sys\n"
            "from tests.test_env_service import cfg\n"
            "from embodied_rl.config.schema.env import ServerConfig\n"
            "from embodied_rl.envs import make_env\n"
            "from embodied_rl.envs.service import shared_images\n"
            "shared_images.SHM_MIN_BYTES = 0\n"
            "env = make_env(cfg(ServerConfig(python=sys.executable)), 1)\n"
            "env.reset()\n"
            "print(env.backend._images.prefix, flush=True)\n"
            "sys.stdin.readline()\n")
    worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parents[1])
    try:
        prefix = worker.stdout.readline().strip()
        assert list_segments(prefix)
        worker.kill()
        worker.wait(timeout=30)
        deadline = time.monotonic() + 30  # the server notices within a second that its parent is gone
        while list_segments(prefix) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not list_segments(prefix)
    finally:
        worker.kill()


def test_the_transfer_benchmark_runs_both_ways(repo_root: Path) -> None:
    """`benchmarks/env_server.py --transfer` (the measurement behind SHM_MIN_BYTES; its simulator
    mode is test_benchmark_smoke's) at its smallest: the ratio line, and no segment left."""
    before = set(os.listdir("/dev/shm"))
    proc = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "env_server.py"), "--transfer", "--envs", "1", "--size", "16",
                           "--rounds", "2", "--replies", "2"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"shared memory / pickled: \d+\.\d+x$", proc.stdout.strip()), proc.stdout
    assert not [n for n in set(os.listdir("/dev/shm")) - before if "envsrv" in n]
