"""Observation images through shared memory between an env worker and the env server it spawned.

A spawned server runs on the env worker's host, so the image arrays of its replies (the bulk of
every reply: N sub-envs x cameras x H x W x 3 bytes) need not be pickled through the socket. The
server copies them into segments of its own `SegmentPool` (distributed/shm.py) and sends a small
`SharedImages` descriptor in their place; the env worker copies them out, which frees the segment
for the server's next reply. A server reached at an address may be on another host: its replies
carry the arrays pickled, as before.

Leaks: every segment name starts with the env worker's prefix, `erl.<run id>.envsrv.<pid>-<n>.`
(the run's "envsrv" channel prefix, distributed/shm.py). The server unlinks its segments when it
closes and when its env worker dies (server.py); the env worker sweeps its prefix when it restarts
or closes the server (a server killed outright cannot), and the run's driver sweeps
`erl.<run id>.envsrv.` at shutdown.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from dataclasses import dataclass

import numpy as np

from embodied_rl.distributed.shm import (
    SegmentPool,
    SegmentReader,
    SegmentRef,
    make_prefix,
    shm_available,
    sweep,
)
from embodied_rl.process_env import RUN_TAG
from embodied_rl.types import EnvObservation

IMAGE_FIELDS = ("main_images", "wrist_images")
#: Images of fewer bytes per reply go pickled: below ~0.1 MiB the segment's bookkeeping costs more
#: than pickling saves (benchmarks/env_server.py --transfer: 0.05 MiB 1.36x slower, 0.19 MiB 1.7x faster).
SHM_MIN_BYTES = 1 << 17
_backends = itertools.count()


@dataclass(frozen=True)
class SharedImages:
    """Stands in for an observation's image fields in a reply: where their bytes are, and per field
    (in IMAGE_FIELDS order, absent ones left out) its name, shape and dtype."""

    ref: SegmentRef
    fields: tuple[tuple[str, tuple[int, ...], str], ...]


def run_prefix(run_id: str) -> str:
    """The prefix of every env-server segment of one run (what the driver sweeps)."""
    return make_prefix(run_id, "envsrv")


def new_prefix() -> str | None:
    """A fresh segment prefix for one served backend of this process, or None where this host
    has no POSIX shared memory (the images then travel pickled)."""
    if not shm_available():
        return None
    run_id = os.environ.get(RUN_TAG) or "norun"
    return f"{run_prefix(run_id)}{os.getpid()}-{next(_backends)}."


class ImageShipper:
    """Server side: moves the images of an outgoing observation into shared memory."""

    def __init__(self, prefix: str, min_bytes: int) -> None:
        self.prefix, self.min_bytes = prefix, min_bytes
        self.pool = SegmentPool(prefix)

    def ship(self, obs: EnvObservation) -> EnvObservation:
        """`obs` with its image fields replaced by one SharedImages (in main_images); an observation
        without images (a step that did not render), or with fewer than min_bytes, goes as it is."""
        arrays = [(name, getattr(obs, name)) for name in IMAGE_FIELDS if getattr(obs, name) is not None]
        if not arrays or sum(a.nbytes for _, a in arrays) < self.min_bytes:
            return obs
        arrays = [(name, np.ascontiguousarray(a)) for name, a in arrays]
        ref = self.pool.write([memoryview(a).cast("B") for _, a in arrays])
        shared = SharedImages(ref, tuple((name, tuple(a.shape), a.dtype.str) for name, a in arrays))
        return dataclasses.replace(obs, main_images=shared, wrist_images=None)

    def close(self) -> None:
        self.pool.close()


class ImageReceiver:
    """Env worker side: puts the images of an incoming observation back as private arrays."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.reader = SegmentReader()

    def receive(self, obs: EnvObservation) -> EnvObservation:
        shared = obs.main_images
        if not isinstance(shared, SharedImages):
            return obs
        data, _ = self.reader.read(shared.ref, copy=True)  # a private copy; the segment is the server's again
        images = {}
        for (name, shape, dtype), (offset, nbytes) in zip(shared.fields, shared.ref.spans, strict=True):
            images[name] = np.frombuffer(data[offset:offset + nbytes], dtype=np.dtype(dtype)).reshape(shape)
        return dataclasses.replace(obs, main_images=images["main_images"], wrist_images=images.get("wrist_images"))

    def sweep(self) -> int:
        """Unlink the segments a server of this backend left (it was killed, or is being replaced)."""
        self.reader.close()
        return sweep(self.prefix)
