"""`ServedBackend`: the `SimulatorBackend` of an env config with `server` set, which forwards every
call to an env server (server.py) running the real backend in its own interpreter.

Faults are handled as the sub-env pool handles a crashed sub-env: a server that dies, or gives no
reply within `subproc.reset_timeout_s` / `step_timeout_s`, is killed and started again (a server
at an address: connected to again), its sub-envs are reset to the reset ids they ran, and the
episodes that were in flight end as failed: those of the step that failed at once
(`BackendStep.failed`), those a failed reset or observe cut short at their next step. After
`subproc.max_restarts` failures in a row the rollout stops with an error.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, ClassVar

import numpy as np

from embodied_rl import plugins
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.backend import BackendStep, SimulatorBackend
from embodied_rl.envs.service import shared_images
from embodied_rl.envs.service.link import RemoteServer, ServerFault, SpawnedServer
from embodied_rl.envs.service.protocol import (
    BackendInfo,
    Close,
    Make,
    Observe,
    Reply,
    Reset,
    ResetIdSpace,
    Step,
)
from embodied_rl.envs.service.shared_images import ImageReceiver, new_prefix
from embodied_rl.errors import ConfigError
from embodied_rl.types import EnvObservation

log = logging.getLogger(__name__)


class ServedBackend(SimulatorBackend):
    """N sub-envs of `cfg.env_type` in an env server; `key` names the config section in errors."""

    params_cls: ClassVar[type] = dict  # the server validates init_params against the simulator's own

    def __init__(self, cfg: EnvConfig, num_envs: int, *, seed: int, key: str = "env") -> None:
        server = cfg.server
        if server is None:
            raise ValueError("ServedBackend needs an env config with server set")
        self.num_envs, self.key, self.opts = num_envs, key, cfg.subproc
        self.link = SpawnedServer(server.python, key) if server.python else RemoteServer(server.address, key)
        # A spawned server is on this host: its images come through shared memory.
        prefix = new_prefix() if server.python else None
        self._images = ImageReceiver(prefix) if prefix is not None else None
        self._make = Make(env_cfg=dataclasses.asdict(cfg), num_envs=num_envs, seed=seed, shm_prefix=prefix,
                          shm_min_bytes=shared_images.SHM_MIN_BYTES, plugins=plugins.loaded())
        self.name = self.link.name
        self._conn: Connection | None = None
        self._reset_ids = np.full(num_envs, -1, np.int64)
        self._tasks: list[tuple[str, str]] = [("?", "?")] * num_envs
        self._lost = np.zeros(num_envs, bool)  # episodes a restart cut short outside a step
        self._last: EnvObservation | None = None
        self.failures_in_row = 0
        self.num_restarts = 0
        try:
            self.info = self._start()
        except ServerFault as fault:
            self.close()
            raise ConfigError(f"{key}.server: {fault}") from None
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the backend contract
    @property
    def action_dim(self) -> int:
        return self.info.action_dim

    @property
    def renders_on_demand(self) -> bool:  # type: ignore[override]
        return self.info.renders_on_demand

    def num_reset_ids(self) -> int | None:
        return self.info.num_reset_ids

    def task_of(self, env_index: int) -> tuple[str, str]:
        return self._tasks[env_index]

    def split_reset_ids(self, split: str) -> Sequence[int]:
        """The reset ids of `split`, as the simulator in the server knows them."""
        return self._call(ResetIdSpace(split), self.opts.reset_timeout_s)

    def reset(self, env_ids: Sequence[int], reset_ids: Sequence[int]) -> EnvObservation:
        ids, rids = [int(i) for i in env_ids], [int(r) for r in reset_ids]
        self._reset_ids[ids] = rids  # a restart during the call resets them to these
        try:
            obs, tasks = self._call(Reset(ids, rids), self.opts.reset_timeout_s)
            for i, task in zip(ids, tasks):
                self._tasks[i] = tuple(task)
        except ServerFault as fault:
            obs = self._recover(fault, "reset", kept=ids).rows(ids)
        self._lost[ids] = False
        self._remember(ids, obs)
        return obs

    def step(self, actions: np.ndarray, env_ids: Sequence[int] | None = None, render: bool = True) -> BackendStep:
        if actions.shape != (self.num_envs, self.info.action_dim):
            raise ValueError(f"step: actions shape {actions.shape}, expected {(self.num_envs, self.info.action_dim)}")
        ids = None if env_ids is None else [int(i) for i in env_ids]
        stepped = np.zeros(self.num_envs, bool)
        stepped[slice(None) if ids is None else ids] = True
        try:
            out: BackendStep = self._call(Step(np.asarray(actions, np.float32), ids, render), self.opts.step_timeout_s)
            if out.obs.main_images is None:  # a step that did not render: the images of the last observation
                last = self._last if self._last is not None else self.observe(range(self.num_envs))
                out.obs = dataclasses.replace(out.obs, main_images=last.main_images.copy(),
                                              wrist_images=None if last.wrist_images is None else last.wrist_images.copy())
        except ServerFault as fault:
            if self._last is None:
                raise RuntimeError("step before every sub-env was reset") from None
            rows = np.flatnonzero(stepped)
            fresh = self._recover(fault, "step", kept=rows.tolist())
            obs = self._last.copy()  # rows not stepped repeat their last observation
            obs.set_rows(rows, fresh.rows(rows))
            out = BackendStep(obs=obs, rewards=np.zeros(self.num_envs, np.float32), terminated=stepped.copy(),
                              success=np.zeros(self.num_envs, bool), failed=stepped.copy())
        lost = self._lost & stepped
        if lost.any():  # their episode ended when the server restarted: it counts as failed now
            out.failed = lost if out.failed is None else out.failed | lost
            out.terminated = out.terminated | lost
            out.success = out.success & ~lost
            self._lost &= ~lost
        self._last = out.obs.copy()  # the caller may write into out.obs
        return out

    def observe(self, env_ids: Sequence[int]) -> EnvObservation:
        ids = [int(i) for i in env_ids]
        try:
            obs = self._call(Observe(ids), self.opts.step_timeout_s)
        except ServerFault as fault:
            obs = self._recover(fault, "observe", kept=ids).rows(ids)
        self._remember(ids, obs)
        return obs

    def served_by(self) -> dict[str, Any]:
        return {"server": self.name, "executable": self.server.python, **self.server.facts}

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(Close())
                if self._conn.poll(10.0):
                    self._conn.recv()
            except (OSError, EOFError):
                pass
            self._conn.close()
            self._conn = None
        self.link.stop()
        if self._images is not None:
            self._images.sweep()

    # ------------------------------------------------------------------ internals
    def _start(self) -> BackendInfo:
        if self._images is not None:  # what a server before this one left (killed, it could not unlink)
            self._images.sweep()
        self._conn, self.server = self.link.start(self.opts.start_timeout_s)
        return self._call(self._make, self.opts.start_timeout_s)

    def _call(self, msg: object, timeout_s: float) -> Any:
        """One request; ServerFault when the server dies or hangs, the server's error otherwise."""
        what = type(msg).__name__.lower()
        conn = self._conn
        if conn is None:
            raise RuntimeError(f"env server {self.name}: not connected")
        try:
            conn.send(msg)
            if not conn.poll(timeout_s):
                raise ServerFault(f"no reply to {what} within {timeout_s:.0f} s (hung)")
            reply: Reply = conn.recv()
        except (EOFError, OSError) as err:
            code = self.link.exit_code()
            raise ServerFault(f"connection lost during {what} ({type(err).__name__}"
                              f"{'' if code is None else f', exit code {code}'})") from None
        if not reply.ok:
            if reply.config_error:
                raise ConfigError(f"{self.key} (env server {self.name}): {reply.error}")
            raise RuntimeError(f"env server {self.name}: {what} raised {reply.error}")
        if not isinstance(msg, Make):
            self.failures_in_row = 0
        return self._receive(msg, reply.value)

    def _receive(self, msg: object, value: Any) -> Any:
        """The reply to `msg` with its observation's images back in arrays (shared_images.py)."""
        if self._images is None:
            return value
        if isinstance(msg, Reset):  # (obs, tasks)
            return self._images.receive(value[0]), value[1]
        if isinstance(msg, Step):
            value.obs = self._images.receive(value.obs)
        elif isinstance(msg, Observe):
            return self._images.receive(value)
        return value

    def _recover(self, fault: ServerFault, what: str, kept: Sequence[int]) -> EnvObservation:
        """Restart the server and reset every sub-env to its reset id; returns all N rows'
        observations. Episodes of rows outside `kept` (the failed call's rows) are marked lost."""
        if (self._reset_ids < 0).any():  # only a reset of all sub-envs comes first (ChunkedVectorEnv.reset)
            raise RuntimeError(f"env server {self.name} ({self.key}) failed during {what} before every sub-env was reset: {fault}")
        while True:
            self.failures_in_row += 1
            if self.failures_in_row > self.opts.max_restarts:
                raise RuntimeError(f"env server {self.name} ({self.key}) failed {self.failures_in_row} times in a row, last during "
                                   f"{what}: {fault}; the rollout stops (env.subproc.max_restarts={self.opts.max_restarts})")
            log.warning("env server %s (%s) failed during %s: %s; restarting it, its episodes in flight count as failed",
                        self.name, self.key, what, fault)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self.num_restarts += 1
            try:
                self._start()
                ids = list(range(self.num_envs))
                obs, tasks = self._call(Reset(ids, self._reset_ids.tolist()), self.opts.reset_timeout_s)
            except ServerFault as again:
                fault = again
                continue
            for i, task in zip(ids, tasks):
                self._tasks[i] = tuple(task)
            self._lost[:] = True
            self._lost[list(kept)] = False
            return obs

    def _remember(self, ids: list[int], obs: EnvObservation) -> None:
        if self._last is not None:
            self._last.set_rows(ids, obs)
        elif ids == list(range(self.num_envs)):
            self._last = obs.copy()
