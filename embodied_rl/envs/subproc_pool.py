"""A pool of worker processes, each hosting one `SubEnv`, with timeouts and crash recovery.

Why a pool of our own: a simulator process that dies or hangs (MuJoCo EGL deadlocks, segfaults
in the physics engine, OOM kills) must never hang or crash a whole rollout (RLinf #892). Every
call here has a deadline; a child that dies, hangs past the deadline or raises is reported with
a warning naming the sub-env, task and reset id, killed, rebuilt from the factory, reset to the
same reset id, and reported as `failed` for that step so its episode counts as a failure.

Batched calls send to all children first and gather afterwards, so the N simulators run in
parallel. Children ignore SIGINT (the parent handles Ctrl-C), are daemonic, and are killed on
`close()` or at interpreter exit.
"""
from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import signal
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

import numpy as np

from embodied_rl.config.schema.env import SubprocConfig
from embodied_rl.envs.backend import SubEnv
from embodied_rl.envs.fork_server import preload_in_fork_server

log = logging.getLogger(__name__)

SubEnvFactory = Callable[[int], SubEnv]


#: deadlines (seconds), restart limit and start method of a pool: the `env.subproc` config section
PoolOptions = SubprocConfig


class SubEnvCrash(Exception):
    """A child process died, timed out or raised; carries the reason for the warning."""


@dataclass
class _Reply:
    ok: bool
    value: object


def _child_main(conn: Connection, factory: SubEnvFactory, rank: int, environ: dict[str, str]) -> None:
    """Child loop: build the SubEnv, then serve (command, payload) requests until 'close'."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # forkserver children inherit the environment of the fork server, which may predate
    # variables the parent set later (e.g. VK_ICD_FILENAMES): apply the parent's snapshot.
    os.environ.update(environ)
    try:
        env = factory(rank)
    except BaseException as err:  # noqa: BLE001 - report construction errors (e.g. missing assets) verbatim
        conn.send(_Reply(False, _picklable(err)))
        conn.close()
        return
    conn.send(_Reply(True, {"action_dim": getattr(env, "action_dim", None), "renders_on_demand": bool(env.renders_on_demand)}))
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if cmd == "close":
            break
        try:
            if cmd == "reset":
                obs = env.reset(int(payload))
                result: object = (obs, env.task())
            elif cmd == "step":
                action, render = payload
                result = env.step(action, render)
            elif cmd == "observe":
                result = env.observe()
            else:
                raise ValueError(f"unknown pool command {cmd!r}")
            conn.send(_Reply(True, result))
        except Exception as err:  # noqa: BLE001 - any simulator error becomes a restart
            conn.send(_Reply(False, RuntimeError(f"{type(err).__name__}: {err}\n{traceback.format_exc()}")))
    try:
        env.close()
    finally:
        conn.close()


def _picklable(err: BaseException) -> BaseException:
    import pickle

    try:
        pickle.dumps(err)
        return err
    except Exception:  # noqa: BLE001 - unpicklable exceptions travel as text
        return RuntimeError(f"{type(err).__name__}: {err}")


class _Child:
    def __init__(self, ctx, factory: SubEnvFactory, rank: int) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_child_main, args=(child_conn, factory, rank, dict(os.environ)),
            name=f"embodied_rl-subenv-{rank}", daemon=True,
        )
        self.proc.start()
        child_conn.close()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()


class SubprocEnvPool:
    """N `SubEnv`s, one per process, built in the child by a picklable `factory(rank)`.

    `reset(env_ids, reset_ids)` returns per env (obs dict, (task_id, instruction), failed);
    `step(actions [N, A])` returns per-env (obs, reward, terminated, success) and failed flags.
    """

    def __init__(self, factory: SubEnvFactory, num_envs: int, options: PoolOptions | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"SubprocEnvPool needs num_envs >= 1, got {num_envs}")
        self.factory = factory
        self.num_envs = num_envs
        self.options = options or PoolOptions()
        self._ctx = mp.get_context(self.options.start_method)
        if self.options.start_method == "forkserver":
            preload_in_fork_server([type(factory).__module__, *getattr(factory, "preload", ())])
        self.reset_ids = np.full(num_envs, -1, dtype=np.int64)  # current episode's reset id
        self.tasks: list[tuple[str, str]] = [("?", "?")] * num_envs
        self.num_restarts = 0
        self._failures_in_row = [0] * num_envs  # a sub-env failing every step is a bug, not bad luck
        self.action_dim: int | None = None  # reported by the SubEnvs (SubEnv.action_dim)
        self.renders_on_demand = False  # reported by the SubEnvs (SubEnv.renders_on_demand)
        self._closed = False
        self._children: list[_Child] = []
        try:
            self._children = [_Child(self._ctx, factory, r) for r in range(num_envs)]
            for r in range(num_envs):
                self._await_ready(r)
        except BaseException:
            self.close()
            raise
        # Kill children at exit even if the owner forgot close(); weakref keeps us collectable.
        ref = weakref.ref(self)
        self._atexit = lambda: (p := ref()) is not None and p.close()
        atexit.register(self._atexit)

    # ------------------------------------------------------------------ public API
    def reset(self, env_ids: Sequence[int], reset_ids: Sequence[int]) -> tuple[list[dict], np.ndarray]:
        """Reset sub-envs `env_ids` to `reset_ids`; returns (obs dicts in env_ids order, failed [len])."""
        env_ids = [int(i) for i in env_ids]
        if len(env_ids) != len(reset_ids):
            raise ValueError(f"reset: {len(env_ids)} env ids but {len(reset_ids)} reset ids")
        for i, rid in zip(env_ids, reset_ids):
            self.reset_ids[i] = int(rid)
        replies = self._call(env_ids, "reset", [int(r) for r in reset_ids], self.options.reset_timeout_s)
        obs, failed = [], np.zeros(len(env_ids), dtype=bool)
        for k, (i, reply) in enumerate(zip(env_ids, replies)):
            if isinstance(reply, SubEnvCrash):
                obs.append(self._recover(i, reply))
                failed[k] = True
            else:
                o, self.tasks[i] = reply
                obs.append(o)
        return obs, failed

    def step(self, actions: np.ndarray, env_ids: Sequence[int] | None = None, render: bool = True):
        """Step sub-envs `env_ids` (default all) with `actions[i]` (render: see SubEnv.step).

        Returns (obs dicts, rewards float32, terminated bool, success bool, failed bool), each
        in `env_ids` order. A failed env's obs is the first observation after its rebuild.
        """
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        replies = self._call(ids, "step", [(actions[i], render) for i in ids], self.options.step_timeout_s)
        n = len(ids)
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        success = np.zeros(n, dtype=bool)
        failed = np.zeros(n, dtype=bool)
        obs: list[dict] = []
        for k, (i, reply) in enumerate(zip(ids, replies)):
            if isinstance(reply, SubEnvCrash):
                self._failures_in_row[i] += 1
                if self._failures_in_row[i] > self.options.max_restarts:
                    raise RuntimeError(
                        f"sub-env {i} (task {self.tasks[i][0]}, reset id {self.reset_ids[i]}) failed "
                        f"{self._failures_in_row[i]} steps in a row, last: {str(reply).splitlines()[0]}"
                    )
                obs.append(self._recover(i, reply))
                failed[k] = terminated[k] = True
            else:
                self._failures_in_row[i] = 0
                o, rewards[k], terminated[k], success[k] = reply
                obs.append(o)
        return obs, rewards, terminated, success, failed

    def observe(self, env_ids: Sequence[int]) -> list[dict]:
        """Current observations of sub-envs `env_ids`, images rendered (SubEnv.observe). A sub-env
        that crashes here is rebuilt and reset: its observation is then the reset one."""
        ids = [int(i) for i in env_ids]
        replies = self._call(ids, "observe", [None] * len(ids), self.options.step_timeout_s)
        return [self._recover(i, r) if isinstance(r, SubEnvCrash) else r for i, r in zip(ids, replies)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for c in self._children:
            try:
                c.conn.send(("close", None))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 10.0
        for c in self._children:
            c.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            c.kill()
        if getattr(self, "_atexit", None) is not None:
            atexit.unregister(self._atexit)

    def pids(self) -> list[int | None]:
        return [c.proc.pid for c in self._children]

    # ------------------------------------------------------------------ internals
    def _call(self, ids: list[int], cmd: str, payloads: list, timeout_s: float) -> list:
        """Send to all first, then gather with one deadline; crashes come back as SubEnvCrash."""
        if self._closed:
            raise RuntimeError("SubprocEnvPool is closed")
        results: dict[int, object] = {}
        pending: dict[Connection, int] = {}
        for i, payload in zip(ids, payloads):
            try:
                self._children[i].conn.send((cmd, payload))
                pending[self._children[i].conn] = i
            except (BrokenPipeError, EOFError, OSError) as err:
                results[i] = SubEnvCrash(f"process died before {cmd} ({type(err).__name__})")
        deadline = time.monotonic() + timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            ready = wait(list(pending), timeout=max(0.0, remaining)) if remaining > 0 else []
            if not ready:
                for conn, i in pending.items():
                    results[i] = SubEnvCrash(f"no reply to {cmd} within {timeout_s:.0f} s (hung)")
                break
            for conn in ready:
                i = pending.pop(conn)
                results[i] = self._receive(i, cmd)
        return [results[i] for i in ids]

    def _receive(self, i: int, cmd: str) -> object:
        child = self._children[i]
        try:
            reply: _Reply = child.conn.recv()
        except (EOFError, OSError):
            child.proc.join(timeout=1.0)
            return SubEnvCrash(f"process died during {cmd} (exit code {child.proc.exitcode})")
        if not reply.ok:
            return SubEnvCrash(f"{cmd} raised {reply.value}")
        return reply.value

    def _await_ready(self, i: int) -> None:
        """Wait for child i to build its SubEnv; construction errors are re-raised as they are."""
        child = self._children[i]
        if not child.conn.poll(self.options.start_timeout_s):
            raise SubEnvCrash(
                f"sub-env {i}: simulator did not start within {self.options.start_timeout_s:.0f} s"
                " (raise env.subproc.start_timeout_s if the machine is just slow)"
            )
        try:
            reply: _Reply = child.conn.recv()
        except EOFError:
            child.proc.join(timeout=1.0)
            raise SubEnvCrash(f"sub-env {i}: process died while starting (exit code {child.proc.exitcode})") from None
        if not reply.ok:
            raise reply.value  # type: ignore[misc]
        self.action_dim = reply.value.get("action_dim")  # type: ignore[union-attr]
        self.renders_on_demand = bool(reply.value.get("renders_on_demand"))  # type: ignore[union-attr]

    def _recover(self, i: int, crash: SubEnvCrash) -> dict:
        """Kill and rebuild sub-env i, reset it to its current reset id; returns the reset obs."""
        task_id, _ = self.tasks[i]
        rid = int(self.reset_ids[i])
        log.warning(
            "sub-env %d (task %s, reset id %d) failed: %s; restarting it, its episode counts as failed",
            i, task_id, rid, str(crash).splitlines()[0] if str(crash) else "crash",
        )
        last: BaseException = crash
        for _attempt in range(self.options.max_restarts):
            self._children[i].kill()
            self.num_restarts += 1
            try:
                self._children[i] = _Child(self._ctx, self.factory, i)
                self._await_ready(i)
                (reply,) = self._call([i], "reset", [rid], self.options.reset_timeout_s)
            except SubEnvCrash as err:
                last = err
                continue
            if isinstance(reply, SubEnvCrash):
                last = reply
                continue
            obs, self.tasks[i] = reply
            return obs
        raise RuntimeError(
            f"sub-env {i} (task {task_id}, reset id {rid}) could not be restarted after "
            f"{self.options.max_restarts} attempts: {last}"
        )
