"""Shared-memory segments for channel payloads on one host.

A producer owns a `SegmentPool`: reusable POSIX shared-memory segments (files in /dev/shm)
that it fills with a message's array bytes; only a small descriptor travels through Ray.
Reuse matters: a fresh 19 MB segment costs ~10-30 ms of page faults, a reused one ~1 ms.

Each segment starts with a 64-byte header: magic, state (FREE/BUSY) and a generation
counter. The producer marks a segment BUSY and bumps the generation before writing; the
consumer checks the generation, reads, then marks it FREE so the producer can reuse it.
No message round trip is needed to give a segment back.

Leaks: every segment name starts with the channel's prefix (`erl.<run>.<channel>.`), so the
channel owner removes all of them on shutdown with `sweep(prefix)`, whoever created them and
whether or not a consumer died holding one.
"""
from __future__ import annotations

import itertools
import mmap
import os
import struct
import uuid
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
HEADER_BYTES = 64
ALIGN = 64
_MAGIC = 0xE1A7C4A1
_HEADER = struct.Struct("<IIQQ")  # magic, state, generation, capacity
_FREE, _BUSY = 0, 1


def shm_available() -> bool:
    """True on hosts with a POSIX shared-memory filesystem (Linux)."""
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def make_prefix(run_id: str, channel: str) -> str:
    """Segment-name prefix unique to one channel of one run (safe characters only)."""
    def clean(text: str) -> str:
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)

    return f"erl.{clean(run_id)}.{clean(channel)}."


def list_segments(prefix: str) -> list[str]:
    """Names of existing segments whose name starts with `prefix`."""
    if not shm_available():
        return []
    return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))


def sweep(prefix: str) -> int:
    """Unlink every segment starting with `prefix`; returns how many were removed."""
    if not prefix.startswith("erl."):
        raise ValueError(f"refusing to sweep /dev/shm with prefix {prefix!r} (must start with 'erl.')")
    removed = 0
    for name in list_segments(prefix):
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class SegmentRef:
    """Where a message's buffers live: segment name, generation, (offset, nbytes) per buffer."""

    name: str
    generation: int
    spans: tuple[tuple[int, int], ...]


class _Segment:
    def __init__(self, name: str, capacity: int, create: bool):
        path = os.path.join(SHM_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, HEADER_BYTES + capacity)
            size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        finally:
            os.close(fd)
        self.name = name
        self.view = memoryview(self.mm)
        if create:
            _HEADER.pack_into(self.mm, 0, _MAGIC, _FREE, 0, capacity)
        magic, _, _, self.capacity = _HEADER.unpack_from(self.mm, 0)
        if magic != _MAGIC:
            self.close()
            raise ValueError(f"/dev/shm/{name} is not a channel segment (bad magic)")

    @property
    def state(self) -> int:
        return struct.unpack_from("<I", self.mm, 4)[0]

    @property
    def generation(self) -> int:
        return struct.unpack_from("<Q", self.mm, 8)[0]

    def set_state(self, state: int) -> None:
        struct.pack_into("<I", self.mm, 4, state)

    def close(self) -> None:
        self.view.release()
        self.mm.close()


class SegmentPool:
    """Producer side: reusable segments under one name prefix, created on demand."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._segments: list[_Segment] = []
        self._ids = itertools.count()
        self._tag = uuid.uuid4().hex[:8]  # distinguishes producers sharing a prefix

    def write(self, buffers: list[memoryview]) -> SegmentRef:
        """Copy `buffers` into a free segment (marked BUSY) and describe where they are."""
        spans, offset = [], 0
        for buf in buffers:
            spans.append((offset, buf.nbytes))
            offset = _round_up(offset + buf.nbytes, ALIGN)
        seg = self._acquire(max(offset, 1))
        generation = seg.generation + 1
        struct.pack_into("<IQ", seg.mm, 4, _BUSY, generation)
        for (off, n), buf in zip(spans, buffers):
            seg.view[HEADER_BYTES + off : HEADER_BYTES + off + n] = buf.cast("B")
        return SegmentRef(seg.name, generation, tuple(spans))

    def _acquire(self, nbytes: int) -> _Segment:
        free = [s for s in self._segments if s.state == _FREE]
        fitting = [s for s in free if s.capacity >= nbytes]
        if fitting:
            return min(fitting, key=lambda s: s.capacity)
        if free:  # replace a too-small free segment instead of growing the pool
            self._drop(free[0])
        # Headroom so batches that grow slightly (longer instructions) still reuse it.
        capacity = _round_up(nbytes + nbytes // 8, 1 << 16)
        seg = _Segment(f"{self.prefix}{self._tag}.{next(self._ids)}", capacity, create=True)
        self._segments.append(seg)
        return seg

    def _drop(self, seg: _Segment) -> None:
        self._segments.remove(seg)
        seg.close()
        try:
            os.unlink(os.path.join(SHM_DIR, seg.name))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Unlink all of this producer's segments (readers keep their mappings until closed)."""
        for seg in list(self._segments):
            self._drop(seg)


class SegmentReader:
    """Consumer side: attaches to segments by name (mappings cached) and reads messages."""

    def __init__(self, max_cached: int = 64):
        self._cache: dict[str, _Segment] = {}
        self._max_cached = max_cached

    def _attach(self, name: str) -> _Segment:
        seg = self._cache.get(name)
        if seg is None:
            if len(self._cache) >= self._max_cached:
                oldest = next(iter(self._cache))
                self._cache.pop(oldest).close()
            try:
                seg = _Segment(name, 0, create=False)
            except FileNotFoundError:
                raise RuntimeError(
                    f"shared-memory segment /dev/shm/{name} is gone: its channel was shut down "
                    "or swept while a message was in flight"
                ) from None
            self._cache[name] = seg
        return seg

    def read(self, ref: SegmentRef, copy: bool) -> tuple[memoryview, _Release | None]:
        """The bytes of the message at `ref` (buffer i is at `ref.spans[i]` within them).

        copy=True: copied into private memory and the segment is freed at once.
        copy=False: a zero-copy view of the segment plus a release handle that frees it
        (Channel calls it when the last decoded array is garbage-collected).
        """
        seg = self._attach(ref.name)
        if seg.generation != ref.generation or seg.state != _BUSY:
            raise RuntimeError(
                f"stale shared-memory message in {ref.name}: generation {ref.generation} was "
                f"overwritten (now {seg.generation}); a message was read twice or its producer reused it"
            )
        end = max((off + n for off, n in ref.spans), default=0)
        region = seg.view[HEADER_BYTES : HEADER_BYTES + end]
        if copy:
            private = memoryview(bytearray(region))
            region.release()
            seg.set_state(_FREE)
            return private, None
        return region, _Release(seg, ref.generation)

    def close(self) -> None:
        for seg in self._cache.values():
            try:
                seg.close()
            except BufferError:  # zero-copy arrays still alive; the mapping dies with them
                pass
        self._cache.clear()


class _Release:
    """Marks a segment FREE once, if it still holds the generation that was read."""

    def __init__(self, seg: _Segment, generation: int):
        self._seg, self._generation = seg, generation

    def __call__(self) -> None:
        seg, self._seg = self._seg, None
        if seg is not None and not seg.mm.closed and seg.generation == self._generation:
            seg.set_state(_FREE)
