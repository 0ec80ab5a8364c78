"""Rollout videos: sub-envs tiled in a grid, optional text overlay, JSON sidecar per video.

Encoding never stalls env stepping: `add_frame` copies the images once and puts them on a
bounded queue; a background thread tiles, draws the overlay and feeds imageio-ffmpeg (libx264,
yuv420p; the ffmpeg subprocess does the actual encoding). The queue only blocks the caller if
encoding falls more than `queue_size` frames behind (back-pressure instead of dropped frames).

Layout: `<video_base_dir>/step_<global_step:06d>/<tag>.mp4` and `<tag>.json` (schema below,
read by the review page; keep it stable). Episode frame ranges: `frame_start` is the first frame
showing the episode (its initial observation after `reset()`, or the frame after the previous
episode's terminal frame for an auto-reset), `frame_end` is exclusive (one past its last frame).
Episodes still running when the video ends are listed with `"finished": false` and `length` =
the env steps they took so far; 0 for an episode an auto-reset started at the rollout's last chunk
boundary (only its first frame is in the video; the review page hides those by default).
"""
from __future__ import annotations

import json
import math
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_rl.types import EnvObservation, EpisodeSummary

# imageio-ffmpeg starts ffmpeg with preexec_fn=os.setpgrp, i.e. Python code between fork and
# exec. From our encoder thread in a process with other threads (torch, Ray, Playwright) the
# forked child can deadlock on a lock another thread held, and the encoder waits forever (seen
# in the test suite). Without preexec_fn the fork/exec is async-signal-safe; the cost is that
# Ctrl-C also reaches ffmpeg, which then finishes the file it is writing.
os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")

SCHEMA_VERSION = 2
MIN_TILE_HEIGHT = 128  # tiles are upscaled (integer factor) to this height so text stays legible


@dataclass
class _Frame:
    main: np.ndarray  # uint8 [N, H, W, 3]
    wrist: np.ndarray | None
    rewards: np.ndarray
    success: np.ndarray
    steps: np.ndarray
    instructions: list[str]


def grid_shape(num_envs: int) -> tuple[int, int]:
    """(rows, cols) of the tile grid: near-square, wider than tall."""
    cols = math.ceil(math.sqrt(num_envs))
    return math.ceil(num_envs / cols), cols


def _overlay(tile: np.ndarray, lines: list[tuple[str, tuple[int, int, int]]]) -> None:
    import cv2

    scale = max(0.35, tile.shape[0] / 400)
    line_h = int(22 * scale) + 2
    cv2.rectangle(tile, (0, 0), (tile.shape[1], line_h * (len(lines) - 1) + 4), (0, 0, 0), thickness=-1)
    for k, (text, color) in enumerate(lines[:-1]):
        cv2.putText(tile, text, (3, line_h * (k + 1) - 3), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)
    # the instruction goes at the bottom, truncated to the tile width
    text, color = lines[-1]
    max_chars = max(4, int(tile.shape[1] / (11 * scale)))
    text = text if len(text) <= max_chars else text[: max_chars - 2] + ".."
    y0 = tile.shape[0] - line_h - 2
    cv2.rectangle(tile, (0, y0), (tile.shape[1], tile.shape[0]), (0, 0, 0), thickness=-1)
    cv2.putText(tile, text, (3, tile.shape[0] - 5), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


class VideoRecorder:
    """Records one video per `begin()`/`end()` pair (one rollout epoch of one env worker stage)."""

    def __init__(self, base_dir: str, *, fps: int = 20, info_on_video: bool = True, tag: str = "worker0_stage0",
                 simulator: str = "", env_worker: int = 0, stage: int = 0, queue_size: int = 64) -> None:
        if fps < 1:
            raise ValueError(f"video fps must be >= 1, got {fps}")
        self.base_dir, self.fps, self.info_on_video, self.tag = base_dir, fps, info_on_video, tag
        self.simulator, self.env_worker, self.stage = simulator, env_worker, stage
        self.queue_size = queue_size
        self.recording = False
        self._meta: dict[str, Any] = {}
        self._episodes: list[dict[str, Any]] = []
        self._open: dict[int, dict[str, Any]] = {}
        self._num_frames = 0
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._grid: dict[str, int] | None = None

    # ------------------------------------------------------------------ API
    def begin(self, global_step: int, policy_version: int, mode: str, run_name: str) -> None:
        if self.recording:
            raise RuntimeError("VideoRecorder.begin() while a video is being recorded; call end() first")
        if mode not in ("train", "eval"):
            raise ValueError(f"video mode must be 'train' or 'eval', got {mode!r}")
        out_dir = os.path.join(self.base_dir, f"step_{global_step:06d}")
        os.makedirs(out_dir, exist_ok=True)
        self._path = os.path.join(out_dir, f"{self.tag}.mp4")
        self._meta = {"run_name": run_name, "mode": mode, "global_step": int(global_step), "policy_version": int(policy_version)}
        self._episodes, self._open, self._num_frames, self._grid, self._error = [], {}, 0, None, None
        self._queue = queue.Queue(maxsize=self.queue_size)
        self._thread = threading.Thread(target=self._encode_loop, name=f"video-{self.tag}", daemon=True)
        self._thread.start()
        self.recording = True

    def episode_start(self, env_index: int, task_id: str, instruction: str, reset_id: int) -> None:
        prev = self._open.pop(env_index, None)
        if prev is not None and self._num_frames > prev["frame_start"]:
            self._close_entry(prev, finished=False)  # abandoned by a reset() before it ended
        self._open[env_index] = dict(
            env_index=env_index, task_id=task_id, instruction=instruction, reset_id=int(reset_id),
            frame_start=self._num_frames, **{"return": 0.0}, success_once=False, success_at_end=False,
        )

    def add_frame(self, obs: EnvObservation, rewards: np.ndarray, success: np.ndarray, steps: np.ndarray) -> None:
        """One frame of all sub-envs: images after an env step, that step's rewards, success so far, step counts."""
        if self._error is not None:
            raise RuntimeError(f"video encoding failed: {self._error}") from self._error
        for i, entry in self._open.items():
            entry["return"] += float(rewards[i])
            entry["success_once"] = entry["success_once"] or bool(success[i])
            entry["length"] = int(steps[i])  # so far; episode_end sets the final length
        frame = _Frame(
            main=np.array(obs.main_images, copy=True),
            wrist=None if obs.wrist_images is None else np.array(obs.wrist_images, copy=True),
            rewards=np.array(rewards, np.float32), success=np.array(success, bool), steps=np.array(steps, np.int64),
            instructions=list(obs.task_descriptions),
        )
        self._num_frames += 1
        assert self._queue is not None
        self._queue.put(frame)

    def episode_end(self, summary: EpisodeSummary) -> None:
        entry = self._open.pop(summary.env_index, None)
        if entry is None:
            return
        entry.update({"return": summary.episode_return}, success_once=summary.success_once,
                     success_at_end=summary.success_at_end, length=summary.episode_len, failed=summary.failed)
        self._close_entry(entry, finished=True)

    def end(self) -> str:
        """Wait for the encoder, write the sidecar atomically; returns the mp4 path."""
        if not self.recording:
            raise RuntimeError("VideoRecorder.end() without begin()")
        self.recording = False
        for entry in list(self._open.values()):
            if self._num_frames > entry["frame_start"]:
                self._close_entry(entry, finished=False)
        self._open = {}
        assert self._queue is not None and self._thread is not None
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"video encoding of {self._path} failed: {self._error}") from self._error
        sidecar = dict(
            schema_version=SCHEMA_VERSION, **self._meta, env_worker=self.env_worker, stage=self.stage,
            simulator=self.simulator, video=os.path.basename(self._path), fps=self.fps,
            num_frames=self._num_frames, grid=self._grid or {},
            episodes=sorted(self._episodes, key=lambda e: (e["env_index"], e["frame_start"])),
        )
        json_path = self._path[:-4] + ".json"
        with open(json_path + ".tmp", "w") as f:
            json.dump(sidecar, f, indent=1)
        os.replace(json_path + ".tmp", json_path)
        return self._path

    def close(self) -> None:
        if self.recording:
            self.end()

    # ------------------------------------------------------------------ internals
    def _close_entry(self, entry: dict[str, Any], finished: bool) -> None:
        entry["frame_end"] = self._num_frames
        entry.setdefault("length", entry["frame_end"] - entry["frame_start"])
        entry.setdefault("failed", False)
        entry["success"] = bool(entry["success_once"])
        entry["finished"] = finished
        self._episodes.append(entry)

    def _compose(self, frame: _Frame) -> np.ndarray:
        n, h, w, _ = frame.main.shape
        scale = max(1, math.ceil(MIN_TILE_HEIGHT / h)) if self.info_on_video else 1
        tw = w * (2 if frame.wrist is not None else 1)
        rows, cols = grid_shape(n)
        th, tw = h * scale, tw * scale
        if self._grid is None:
            self._grid = {"rows": rows, "cols": cols, "tile_height": th, "tile_width": tw, "num_envs": n}
        canvas = np.zeros((rows * th + (rows * th) % 2, cols * tw + (cols * tw) % 2, 3), np.uint8)
        for i in range(n):
            tile = frame.main[i] if frame.wrist is None else np.concatenate([frame.main[i], frame.wrist[i]], axis=1)
            if scale > 1:
                tile = tile.repeat(scale, axis=0).repeat(scale, axis=1)
            else:
                tile = tile.copy()
            if self.info_on_video:
                ok = bool(frame.success[i])
                _overlay(tile, [
                    (f"env {i} t={int(frame.steps[i])}", (255, 255, 255)),
                    (f"r={float(frame.rewards[i]):+.2f}", (255, 255, 255)),
                    ("success" if ok else "no success", (80, 255, 80) if ok else (255, 120, 120)),
                    (frame.instructions[i], (255, 255, 0)),
                ])
            r, c = divmod(i, cols)
            canvas[r * th:(r + 1) * th, c * tw:(c + 1) * tw] = tile
        return canvas

    def _encode_loop(self) -> None:
        import imageio.v2 as imageio

        assert self._queue is not None
        writer = None
        try:
            while (frame := self._queue.get()) is not None:
                image = self._compose(frame)
                if writer is None:
                    writer = imageio.get_writer(
                        self._path, fps=self.fps, codec="libx264", pixelformat="yuv420p",
                        macro_block_size=1, ffmpeg_log_level="error",
                    )
                writer.append_data(image)
        except BaseException as err:  # noqa: BLE001 - surfaced to the env thread on the next add_frame/end
            self._error = err
            while self._queue.get() is not None:  # drain so the producer never blocks forever
                pass
        finally:
            if writer is not None:
                writer.close()
