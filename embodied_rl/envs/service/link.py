"""How an env worker reaches its env server: a server it spawns (`server.python`) on a private Unix
socket, or one started by hand at `server.address`; each (re)start is a new connection, checked
by the handshake."""
from __future__ import annotations

import collections
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from pathlib import Path

import embodied_rl
from embodied_rl.envs.service.protocol import (
    KEY_ENV,
    PROTOCOL_VERSION,
    Hello,
    Reply,
    ServerInfo,
    key_from_env,
    parse_address,
)
from embodied_rl.errors import ConfigError

#: the directory holding the embodied_rl package this process runs: a spawned server imports the
#: same code from there (PYTHONPATH) when it is a source checkout; an installed package (in
#: site-packages, beside the trainer's other packages) must be installed in the server's environment too
PACKAGE_ROOT = str(Path(embodied_rl.__file__).resolve().parents[1])
_INSTALLED = Path(PACKAGE_ROOT).name in ("site-packages", "dist-packages")


class ServerFault(Exception):
    """The server died, hung, or could not be (re)started: the env worker restarts it."""


def connect(family: int, address: object, key: bytes, timeout_s: float) -> Connection:
    """A Connection to a multiprocessing Listener with `key`, the TCP/Unix connect bounded by timeout_s."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(address)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    conn = Connection(sock.detach())
    try:
        answer_challenge(conn, key)
        deliver_challenge(conn, key)
    except BaseException:
        conn.close()
        raise
    return conn


def handshake(conn: Connection, name: str, key: str, timeout_s: float) -> ServerInfo:
    conn.send(Hello(PROTOCOL_VERSION))
    if not conn.poll(timeout_s):
        raise ServerFault(f"env server {name}: no answer to the handshake within {timeout_s:.0f} s")
    reply: Reply = conn.recv()
    if not reply.ok:
        raise ConfigError(f"{key}.server: env server {name}: {reply.error}; run the same embodied_rl version on both sides")
    info: ServerInfo = reply.value
    if info.version != PROTOCOL_VERSION:
        raise ConfigError(f"{key}.server: env server {name} speaks protocol version {info.version}, this env worker "
                          f"{PROTOCOL_VERSION}; run the same embodied_rl version on both sides")
    return info


class SpawnedServer:
    """`python -m embodied_rl.envs.service --once` with the configured interpreter, started anew for
    every connection. Its environment is the env worker's with PYTHONPATH set to this package's
    root (the server's own virtual environment provides the rest) and a fresh key; its stderr is
    passed on to the worker's, the last lines kept for errors."""

    def __init__(self, python: str, key: str) -> None:
        self.python, self.key = python, key
        self.name = python
        self.proc: subprocess.Popen | None = None
        self._dir: str | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=20)
        self._starts = 0

    def start(self, timeout_s: float) -> tuple[Connection, ServerInfo]:
        self.stop()
        self._starts += 1
        self._dir = tempfile.mkdtemp(prefix="erl-env-")
        path = os.path.join(self._dir, f"s{self._starts}")
        secret = os.urandom(32).hex()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {KEY_ENV: secret}
        if not _INSTALLED:
            env["PYTHONPATH"] = PACKAGE_ROOT
        try:
            self.proc = subprocess.Popen([self.python, "-m", "embodied_rl.envs.service", "--listen", path, "--once"], env=env,
                                         stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        except OSError as err:
            raise ConfigError(f"{self.key}.server.python={self.python}: cannot run it ({err.strerror or err}); "
                              "give the path of a Python interpreter of the simulator's virtual environment") from None
        self._tail.clear()
        forward = threading.Thread(target=self._forward, args=(self.proc,), daemon=True, name="env-server-stderr")
        forward.start()
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                forward.join(timeout=5.0)  # its last words
                last = next((line for line in reversed(self._tail) if line.strip()), "(no output)")
                raise ServerFault(f"env server {self.python} exited with code {code} before listening: {last.strip()}; check that "
                                  f"`{self.python} -c 'import numpy, embodied_rl'` works with PYTHONPATH={PACKAGE_ROOT} and that its "
                                  "environment has the simulator")
            if os.path.exists(path):
                try:
                    conn = connect(socket.AF_UNIX, path, secret.encode(), max(0.1, deadline - time.monotonic()))
                    return conn, handshake(conn, self.python, self.key, max(0.1, deadline - time.monotonic()))
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerFault(f"env server {self.python} did not listen within {timeout_s:.0f} s; raise {self.key}.subproc."
                                  "start_timeout_s if its machine is just slow, or run it by hand to see why: "
                                  f"{self.python} -m embodied_rl.envs.service --help")
            time.sleep(0.05)

    def _forward(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            self._tail.append(line)
            sys.stderr.write(line)

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class RemoteServer:
    """A server started by hand (`embodied-rl env-server --listen HOST:PORT`); its key comes from
    EMBODIED_RL_ENV_SERVER_KEY. A restart is a new connection (a new backend on the server)."""

    def __init__(self, address: str, key: str) -> None:
        try:
            self.address = parse_address(address)
        except ValueError as err:
            raise ConfigError(f"{key}.server.address: {err}") from None
        self.name, self.key = address, key
        self.secret = key_from_env(f"{key}.server.address={address}")

    def start(self, timeout_s: float) -> tuple[Connection, ServerInfo]:
        try:
            conn = connect(socket.AF_INET, self.address, self.secret, timeout_s)
        except (OSError, EOFError) as err:
            raise ServerFault(f"env server {self.name}: cannot connect ({err}); start it there with "
                              f"`embodied-rl env-server --listen {self.name}`") from None
        except Exception as err:  # noqa: BLE001 - AuthenticationError: the keys differ
            raise ConfigError(f"{self.key}.server.address={self.name}: {err}; set the same {KEY_ENV} on the server and the trainer") from None
        return conn, handshake(conn, self.name, self.key, timeout_s)

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        pass
