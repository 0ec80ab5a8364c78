"""Where episodes are recorded: in this process, or in a pool of worker processes.

Both take reset ids lazily from an iterator (the collector stops it once it has enough) and
yield `EpisodeRecord`s; the pool yields them in completion order, which the collector
re-orders by reset id so the dataset does not depend on the number of workers.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from collections.abc import Iterator
from typing import Protocol

from embodied_rl.demos.recorder import DemoRecorder, EpisodeRecord, RecorderInfo
from embodied_rl.demos.spec import DemoSpec
from embodied_rl.envs.fork_server import preload_in_fork_server
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory
from embodied_rl.errors import UserError

_POLL_S = 2.0


class EpisodeSource(Protocol):
    #: the recorder's facts, set once an episode has been yielded
    info: RecorderInfo | None

    def episodes(self, reset_ids: Iterator[int]) -> Iterator[EpisodeRecord]: ...


class LocalSource:
    """Records with an existing `DemoRecorder` (one simulator, this process).

    `spec` (default: the recorder's) may differ from the recorder's only in the episode rules
    (e.g. max_episode_steps): a simulator is reused, never given other cameras or actions.
    """

    def __init__(self, recorder: DemoRecorder, spec: DemoSpec | None = None) -> None:
        self.recorder, self.spec = recorder, spec or recorder.spec
        own = recorder.spec
        if (self.spec.params, self.spec.env_cfg.action_adapter, self.spec.instruction) != (
                own.params, own.env_cfg.action_adapter, own.instruction):
            raise ValueError("LocalSource: the spec needs another simulator than the recorder's")

    @property
    def info(self) -> RecorderInfo:
        return self.recorder.info()

    def episodes(self, reset_ids: Iterator[int]) -> Iterator[EpisodeRecord]:
        for reset_id in reset_ids:
            yield self.recorder.record(reset_id, self.spec.max_episode_steps)


def _worker(spec: DemoSpec, tasks: mp.Queue, results: mp.Queue) -> None:
    from embodied_rl.process_env import configure_process_env

    configure_process_env()
    try:
        recorder = DemoRecorder(spec)
    except UserError as err:  # e.g. a missing asset: the parent reports it as a one-line error
        results.put(("user_error", str(err)))
        return
    except BaseException:  # noqa: BLE001 - report, never hang the parent
        results.put(("error", traceback.format_exc()))
        return
    try:
        while (reset_id := tasks.get()) is not None:
            try:
                results.put(("episode", recorder.record(reset_id, spec.max_episode_steps), recorder.info()))
            except BaseException:  # noqa: BLE001
                results.put(("error", f"reset id {reset_id}:\n{traceback.format_exc()}"))
                return
    finally:
        recorder.close()


class ProcessSource:
    """`workers` processes, one simulator each; at most 2 episodes per worker in flight.

    Reset ids go to the workers round-robin (the k-th id to worker k mod workers), not to whichever
    is free: a ManiSkill CPU scene carries contact state from one episode into the next (the same
    reset id pushed after other episodes can leave the cube centimetres apart), so each worker must see the
    same sequence of episodes for a recording to repeat. The demos then depend on --workers."""

    def __init__(self, spec: DemoSpec, workers: int, start_method: str = "forkserver") -> None:
        if workers < 1:
            raise UserError(f"--workers must be >= 1, got {workers}")
        self.spec, self.workers = spec, workers
        self.ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            preload_in_fork_server([__name__, *ManiSkillSubEnvFactory.preload])  # the expert's simulator
        self.info: RecorderInfo | None = None

    def episodes(self, reset_ids: Iterator[int]) -> Iterator[EpisodeRecord]:
        tasks = [self.ctx.Queue() for _ in range(self.workers)]
        results = self.ctx.Queue()
        procs = [self.ctx.Process(target=_worker, args=(self.spec, q, results), daemon=True) for q in tasks]
        for p in procs:
            p.start()
        in_flight = issued = 0

        def feed() -> None:
            nonlocal in_flight, issued
            reset_id = next(reset_ids, None)
            if reset_id is not None:
                tasks[issued % self.workers].put(reset_id)
                issued += 1
                in_flight += 1

        try:
            for _ in range(2 * self.workers):
                feed()
            while in_flight:
                _, record, self.info = self._next(results, procs)
                in_flight -= 1
                yield record
                feed()
        finally:
            for q in tasks:
                q.put(None)
            for p in procs:
                p.join(timeout=10)  # a worker holding unread results after an error may not exit by itself
                if p.is_alive():
                    p.kill()
                    p.join()

    @staticmethod
    def _next(results: mp.Queue, procs: list) -> tuple:
        while True:
            try:
                msg = results.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p for p in procs if not p.is_alive()]
                if dead and (len(dead) == len(procs) or any(p.exitcode != 0 for p in dead)):
                    raise RuntimeError(f"demo worker process died (exit code {dead[0].exitcode})") from None
                continue
            if msg[0] == "user_error":
                raise UserError(msg[1])
            if msg[0] == "error":
                raise RuntimeError(f"demo worker failed: {msg[1]}")
            return msg
