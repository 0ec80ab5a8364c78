"""The env-server protocol: the messages an env worker (client.py) and an env server (server.py)
exchange over one `multiprocessing.connection` connection, pickled (numpy arrays included).

One request, one reply, in order. The first request is `Hello`; a server that speaks another
`PROTOCOL_VERSION` refuses the connection in its reply. Then `Make` builds the backend the
connection owns, and the backend calls follow until `Close` (or the connection ends, which
closes the backend too). Images of the replies' observations travel pickled, or through shared
memory where the env worker asks for it (shared_images.py). Bump PROTOCOL_VERSION whenever a
message or reply changes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_rl.errors import ConfigError

PROTOCOL_VERSION = 2
#: Environment variable holding the connection key (hex) on both sides: a server started by hand
#: reads it, an env worker connecting to it reads it; a spawned server gets a fresh one there.
KEY_ENV = "EMBODIED_RL_ENV_SERVER_KEY"


@dataclass(frozen=True)
class Hello:
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Make:
    """Build `num_envs` sub-envs of `env_cfg["env_type"]`: `env_cfg` is the env config as a dict
    (init_params included), validated by the server against its simulator's schema.
    `shm_prefix`: the server is on the env worker's host; it sends observation images of at least
    `shm_min_bytes` per reply in shared memory segments named with this prefix (None: all pickled).
    `plugins`: the plug-in modules imported in the env worker; the server imports them when
    `env_type` is none of its own simulators."""

    env_cfg: dict[str, Any]
    num_envs: int
    seed: int
    shm_prefix: str | None = None
    shm_min_bytes: int = 0
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResetIdSpace:
    split: str


@dataclass(frozen=True)
class Reset:
    env_ids: list[int]
    reset_ids: list[int]


@dataclass(frozen=True)
class Step:
    actions: np.ndarray  # float32 [N, action_dim], controller space
    env_ids: list[int] | None  # None: all
    render: bool = True


@dataclass(frozen=True)
class Observe:
    env_ids: list[int]


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class ServerInfo:
    """Hello's reply; `facts`: the server's simulator_facts (package versions and renderer of its
    interpreter), recorded in the run's environment.json."""

    version: int
    python: str
    pid: int
    facts: dict[str, Any]


@dataclass(frozen=True)
class BackendInfo:
    """Make's reply: what the trainer side needs to know of the backend."""

    action_dim: int
    renders_on_demand: bool
    num_reset_ids: int | None


@dataclass(frozen=True)
class Reply:
    """The answer to every request: `value` when ok; else `error` (one line for a config error,
    with a traceback otherwise) and whether it is a config error (bad names or parameters).

    Reset's value is (EnvObservation, [(task_id, instruction) per reset row]): the tasks change at
    resets only, so the client answers `task_of` from them without a round trip. Step's value is a
    BackendStep; after a step with render=False on a backend that renders on demand its images are
    None: they are those of the last rendered observation, which the client already holds."""

    ok: bool
    value: Any = None
    error: str = ""
    config_error: bool = False


def new_key() -> bytes:
    return os.urandom(32)


def key_from_env(where: str) -> bytes:
    """The key a server started by hand and the env workers that connect to it share."""
    value = os.environ.get(KEY_ENV, "")
    if not value:
        raise ConfigError(f"{where} needs the connection key in {KEY_ENV} (the same on the server and the trainer), e.g. "
                       f"export {KEY_ENV}=$(python -c 'import os; print(os.urandom(32).hex())')")
    return value.encode()


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError with the expected form otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT (e.g. 0.0.0.0:7600), got {text!r}")
    return host, int(port)
