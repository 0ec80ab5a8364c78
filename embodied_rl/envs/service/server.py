"""The env server: builds the real simulator backend in this interpreter and serves one env
worker's calls per connection (protocol.py).

    python -m embodied_rl.envs.service --listen HOST:PORT      # by hand, for env workers on other hosts
    embodied-rl env-server --listen HOST:PORT                  # the same
    python -m embodied_rl.envs.service --listen /dir/sock --once   # what an env worker spawns

Both read the connection key from EMBODIED_RL_ENV_SERVER_KEY. A server started by hand serves
every connection in a thread of its own (one backend each, closed when its connection ends);
`--once` serves one connection and exits, and also when the process that started it dies.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener
from typing import Any

from embodied_rl.envs.provenance import simulator_facts
from embodied_rl.envs.service.protocol import (
    PROTOCOL_VERSION,
    BackendInfo,
    Close,
    Hello,
    Make,
    Observe,
    Reply,
    Reset,
    ResetIdSpace,
    ServerInfo,
    Step,
    key_from_env,
    parse_address,
)
from embodied_rl.envs.service.shared_images import ImageShipper
from embodied_rl.errors import ConfigError

log = logging.getLogger("embodied_rl.env_server")
#: The shared-memory image pools of this process's open sessions: unlinked on the way out when the
#: env worker that spawned this server dies (its own sweep cannot run then).
_SHIPPERS: set[ImageShipper] = set()


class Session:
    """One connection's backend and the handlers of its requests."""

    def __init__(self, version: int = PROTOCOL_VERSION) -> None:
        self.version = version
        self.backend: Any = None
        self.backend_cls: Any = None
        self.params: Any = None
        self.shipper: ImageShipper | None = None

    def handle(self, msg: object) -> Any:
        if isinstance(msg, Make):
            return self._make(msg)
        if self.backend is None:
            raise ValueError(f"{type(msg).__name__} before Make: the first request after Hello builds the backend")
        if isinstance(msg, ResetIdSpace):
            return self.backend_cls.reset_id_space(self.params, msg.split)
        if isinstance(msg, Reset):
            obs = self.backend.reset(msg.env_ids, msg.reset_ids)
            return self._ship(obs), [self.backend.task_of(int(i)) for i in msg.env_ids]
        if isinstance(msg, Step):
            out = self.backend.step(msg.actions, msg.env_ids, render=msg.render)
            if not msg.render and self.backend.renders_on_demand:
                # images unchanged since the last rendered observation, which the client holds: not sent
                out.obs = dataclasses.replace(out.obs, main_images=None, wrist_images=None)
            out.obs = self._ship(out.obs)
            return out
        if isinstance(msg, Observe):
            return self._ship(self.backend.observe(msg.env_ids))
        raise ValueError(f"unknown request {type(msg).__name__}")

    def _ship(self, obs: Any) -> Any:
        return obs if self.shipper is None else self.shipper.ship(obs)

    def _make(self, msg: Make) -> BackendInfo:
        from embodied_rl.config.schema.env import EnvConfig
        from embodied_rl.config.typecheck import build

        if self.backend is not None:
            raise ValueError("Make twice on one connection: open a connection per backend")
        names = {f.name for f in dataclasses.fields(EnvConfig)}
        # A mixture task's own keys (share, train_size, ...) are the trainer's; this side builds one env.
        data = {k: v for k, v in msg.env_cfg.items() if k in names} | {"tasks": [], "server": None}
        cfg = build(EnvConfig, data, "env")
        try:
            backend_cls = _simulator(cfg.env_type, msg.plugins)
        except KeyError as err:
            raise ConfigError(f"env_type: {err.args[0]} in the server's environment ({sys.executable}); install the "
                              "simulator there") from None
        params = build(backend_cls.params_cls, dict(cfg.init_params), "init_params")
        backend_cls.check_names(params, "init_params")
        self.backend = backend_cls(cfg, params, msg.num_envs, seed=msg.seed)
        self.backend_cls, self.params = backend_cls, params
        if msg.shm_prefix is not None:
            self.shipper = ImageShipper(msg.shm_prefix, msg.shm_min_bytes)
            _SHIPPERS.add(self.shipper)
        log.info("env server %d: %d sub-envs of %s", os.getpid(), msg.num_envs, cfg.env_type)
        return BackendInfo(action_dim=int(self.backend.action_dim), renders_on_demand=bool(self.backend.renders_on_demand),
                           num_reset_ids=self.backend.num_reset_ids())

    def close(self) -> None:
        if self.shipper is not None:
            _SHIPPERS.discard(self.shipper)
            self.shipper.close()
            self.shipper = None
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def _simulator(env_type: str, plugins: Sequence[str]) -> Any:
    """The backend class of `env_type`: a built-in or installed one, else one the env worker's
    plug-in modules register (imported here only then: a policy plug-in's imports need not exist
    in a simulator's environment)."""
    from embodied_rl.envs.backend import get_simulator
    from embodied_rl.plugins import load_plugins

    try:
        return get_simulator(env_type)
    except KeyError:
        if not plugins:
            raise
    load_plugins(list(plugins))
    return get_simulator(env_type)


def serve_connection(conn: Connection, version: int = PROTOCOL_VERSION) -> None:
    """Answer `conn`'s requests until Close or the end of the connection; then close the backend."""
    session = Session(version)
    try:
        try:
            hello = conn.recv()
        except (EOFError, OSError):
            return
        if not isinstance(hello, Hello) or hello.version != version:
            theirs = hello.version if isinstance(hello, Hello) else type(hello).__name__
            conn.send(Reply(False, error=f"the env server speaks protocol version {version}, the env worker {theirs}", config_error=True))
            return
        conn.send(Reply(True, ServerInfo(version=version, python=sys.executable, pid=os.getpid(), facts=simulator_facts())))
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(msg, Close):
                session.close()
                conn.send(Reply(True))
                return
            try:
                reply = Reply(True, session.handle(msg))
            except ConfigError as err:
                reply = Reply(False, error=str(err), config_error=True)
            except Exception as err:  # noqa: BLE001 - the env worker decides; the server serves on
                reply = Reply(False, error=f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
            conn.send(reply)
    finally:
        try:
            session.close()
        finally:
            conn.close()


def listen(address: str, key: bytes) -> Listener:
    """A Listener on 'HOST:PORT' or on a Unix socket path (an absolute path)."""
    if address.startswith("/"):
        return Listener(address, family="AF_UNIX", authkey=key)
    return Listener(parse_address(address), family="AF_INET", authkey=key)


def serve(listener: Listener, *, once: bool = False, version: int = PROTOCOL_VERSION) -> None:
    """Accept connections (each served in its own thread) until interrupted, or serve one (`once`)."""
    while True:
        try:
            conn = listener.accept()
        except (AuthenticationError, EOFError, ConnectionError) as err:  # a client without the key, or gone
            if once:
                raise
            log.warning("env server: refused a connection: %s", err)
            continue
        if once:
            serve_connection(conn, version)
            return
        threading.Thread(target=serve_connection, args=(conn, version), daemon=True, name="env-server-conn").start()


def _exit_with_parent() -> None:
    """A spawned server ends with the env worker that started it, even one killed outright."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        for shipper in list(_SHIPPERS):
            shipper.close()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="env-server-parent").start()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embodied-rl env-server", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, metavar="HOST:PORT",
                        help="address to listen on, e.g. 0.0.0.0:7600 (or an absolute Unix socket path); the key is read from "
                             "EMBODIED_RL_ENV_SERVER_KEY, which the trainer's env workers must have too")
    parser.add_argument("--once", action="store_true",
                        help="serve one connection, then exit (as spawned by an env worker; also exits when its parent dies)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from embodied_rl.plugins import load_plugins
    from embodied_rl.process_env import configure_process_env

    ns = build_parser().parse_args(None if argv is None else list(argv))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    configure_process_env()
    load_plugins()  # installed entry-point simulators
    key = key_from_env("embodied-rl env-server")
    if ns.once:
        _exit_with_parent()
    try:
        listener = listen(ns.listen, key)
    except ValueError as err:
        raise ConfigError(f"env-server --listen: {err}") from None
    except OSError as err:
        raise ConfigError(f"env-server --listen {ns.listen}: {err.strerror or err}; pick a free port or another address") from None
    log.info("env server %d listening on %s (protocol version %d)", os.getpid(), ns.listen, PROTOCOL_VERSION)
    try:
        with listener:
            serve(listener, once=ns.once)
    except KeyboardInterrupt:
        return 130
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """`python -m embodied_rl.envs.service`: main with the CLI's one-line errors (exit 2)."""
    from embodied_rl.errors import UserError

    try:
        return main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
