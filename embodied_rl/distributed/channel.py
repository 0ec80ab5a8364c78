"""Bounded, keyed producer -> consumer channels between Ray workers.

Only descriptors go through Ray: a small async Ray actor holds one bounded asyncio queue per
key (`queue_size`, 0 = unbounded; a full queue blocks `put`, which is the backpressure).
Array payloads (numpy arrays and CPU torch tensors anywhere inside the message, found with
pickle protocol 5 out-of-band buffers) take one of two routes, chosen per key:

- shared memory (`distributed/shm.py`) when every registered consumer of the key runs on the
  producer's node: one memcpy in, one memcpy out (or zero-copy with `get(copy=False)`);
- Ray's object store otherwise (consumer on another node, none registered yet, or no /dev/shm).

Each process counts what it put per route (`take_counts`, reported in the workers' metrics).
Consumers register their node when they first `get` a key (or earlier with
`register_consumer`), so wire consumers before producers start for the fast path.
Segment names carry the channel prefix; `shutdown()` (the owner) sweeps them all, so a
consumer that dies mid-message leaks nothing. Every blocking call has a timeout that raises
`ChannelTimeout` naming the channel and key instead of hanging silently.
"""
from __future__ import annotations

import asyncio
import io
import pickle
import sys
import uuid
import weakref
from typing import Any

import numpy as np
import ray

from embodied_rl.distributed import shm

INLINE_MAX_BYTES = 64 * 1024  # messages with fewer buffer bytes travel inside the descriptor
DEFAULT_TIMEOUT_S = 900.0


class ChannelTimeout(TimeoutError):
    """A put/get waited longer than its timeout (the peer is probably dead or stuck)."""


# ---------------------------------------------------------------- serialization


def _rebuild_tensor(flat: np.ndarray, dtype: str, shape: tuple[int, ...]):
    import torch

    return torch.from_numpy(flat).view(getattr(torch, dtype)).reshape(shape)


class _Pickler(pickle.Pickler):
    """Pickle protocol 5; CPU torch tensors become byte arrays so they go out of band too."""

    def reducer_override(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
            flat = obj.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
            return _rebuild_tensor, (flat, str(obj.dtype).removeprefix("torch."), tuple(obj.shape))
        return NotImplemented


def dumps(obj: Any) -> tuple[bytes, list[memoryview]]:
    """Skeleton bytes plus the raw out-of-band buffers of every array in `obj`."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return out.getvalue(), [b.raw() for b in buffers]


def loads(skeleton: bytes, buffers: list) -> Any:
    return pickle.loads(skeleton, buffers=buffers)


# ---------------------------------------------------------------- queue actor


@ray.remote(num_cpus=0, max_concurrency=1000)
class _QueueActor:
    """Holds descriptors only; payloads never pass through here."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue] = {}
        self._consumers: dict[str, set[str]] = {}

    def _q(self, key: str, size: int) -> asyncio.Queue:
        if key not in self._queues:
            self._queues[key] = asyncio.Queue(maxsize=size)
        return self._queues[key]

    async def put(self, key: str, size: int, item: Any, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._q(key, size).put(item), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def get(self, key: str, size: int, timeout: float | None) -> tuple[bool, Any]:
        try:
            return True, await asyncio.wait_for(self._q(key, size).get(), timeout)
        except asyncio.TimeoutError:
            return False, None

    def register_consumer(self, key: str, node_id: str) -> None:
        self._consumers.setdefault(key, set()).add(node_id)

    def consumer_nodes(self, key: str) -> list[str]:
        return sorted(self._consumers.get(key, ()))

    def qsize(self, key: str, size: int) -> int:
        return self._q(key, size).qsize()


# ---------------------------------------------------------------- channel


class _Local:
    """Per-process state of a channel endpoint (never pickled)."""

    def __init__(self, prefix: str):
        self.pool = shm.SegmentPool(prefix)
        self.reader = shm.SegmentReader()
        self.routes: dict[str, str] = {}
        self.registered: set[str] = set()
        self.sent: dict[str, list[int]] = {}  # route -> [messages, payload bytes] put by this process
        self.node_id = ray.get_runtime_context().get_node_id()


_LOCAL: dict[str, _Local] = {}


class Channel:
    """A named set of bounded queues; picklable, so pass it to Ray workers as an argument."""

    def __init__(self, name: str, queue_size: int, prefix: str, actor, timeout_s: float, use_shm: bool, owns_actor: bool = True):
        self.name, self.queue_size, self.prefix = name, queue_size, prefix
        self._actor, self.timeout_s, self.use_shm, self._owns_actor = actor, timeout_s, use_shm, owns_actor

    @classmethod
    def create(
        cls,
        name: str,
        *,
        queue_size: int = 0,
        run_id: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        use_shm: bool = True,
        host: Channel | None = None,
    ) -> Channel:
        """Start the channel's queue actor (Ray must be initialised); the caller owns it. With
        `host`, the queues live in that channel's actor instead (one process fewer; its owner
        stops it)."""
        if queue_size < 0:
            raise ValueError(f"channel {name!r}: queue_size must be >= 0 (0 = unbounded), got {queue_size}")
        prefix = shm.make_prefix(run_id or uuid.uuid4().hex[:12], name)
        actor = host._actor if host is not None else _QueueActor.options(name=None).remote()
        return cls(name, queue_size, prefix, actor, timeout_s, use_shm and shm.shm_available(), owns_actor=host is None)

    def _key(self, key: str) -> str:
        """The key in the queue actor, which may hold other channels' queues."""
        return f"{self.prefix}/{key}"

    def _local(self) -> _Local:
        if self.prefix not in _LOCAL:
            _LOCAL[self.prefix] = _Local(self.prefix)
        return _LOCAL[self.prefix]

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout_s if timeout is None else timeout

    # ---- producer
    def put(self, item: Any, key: str = "default", *, timeout: float | None = None) -> None:
        """Send `item` to `key`; blocks while the queue is full (up to the timeout)."""
        skeleton, buffers = dumps(item)
        nbytes = sum(b.nbytes for b in buffers)
        if nbytes <= INLINE_MAX_BYTES:
            desc = ("inline", skeleton, [bytearray(b) for b in buffers])
        elif self._route(key) == "shm":
            desc = ("shm", skeleton, self._local().pool.write(buffers))
        else:
            desc = ("ray", ray.put(item))
        sent = self._local().sent.setdefault(desc[0], [0, 0])
        sent[0], sent[1] = sent[0] + 1, sent[1] + nbytes
        ok = ray.get(self._actor.put.remote(self._key(key), self.queue_size, desc, self._timeout(timeout)))
        if not ok:
            raise ChannelTimeout(
                f"channel {self.name!r} key {key!r}: queue full (queue_size={self.queue_size}) for "
                f"{self._timeout(timeout):.0f} s; is its consumer alive?"
            )

    def _route(self, key: str) -> str:
        local = self._local()
        if not self.use_shm:
            return "ray"
        if key not in local.routes:
            nodes = ray.get(self._actor.consumer_nodes.remote(self._key(key)))
            if not nodes:
                return "ray"  # no consumer known yet: the object store works from any node
            local.routes[key] = "shm" if nodes == [local.node_id] else "ray"
        return local.routes[key]

    def take_counts(self, label: str) -> dict[str, float]:
        """Messages and payload bytes this process put since the last call, per route (inline,
        shm, ray) as `channel/<label>/<route>_{messages,bytes}`; the counters restart at zero."""
        local = self._local()
        out = {}
        for route, (messages, nbytes) in sorted(local.sent.items()):
            out[f"channel/{label}/{route}_messages"] = float(messages)
            out[f"channel/{label}/{route}_bytes"] = float(nbytes)
        local.sent.clear()
        return out

    # ---- consumer
    def register_consumer(self, key: str = "default") -> None:
        """Declare that this process reads `key` (lets producers pick shared memory)."""
        local = self._local()
        if key not in local.registered:
            ray.get(self._actor.register_consumer.remote(self._key(key), local.node_id))
            local.registered.add(key)

    def get(self, key: str = "default", *, timeout: float | None = None, copy: bool = True) -> Any:
        """Receive the next item of `key`, blocking up to the timeout.

        copy=False returns arrays that view shared memory directly; the segment goes back to
        the producer when the last of those arrays is garbage-collected, so drop them promptly.
        """
        self.register_consumer(key)
        ok, desc = ray.get(self._actor.get.remote(self._key(key), self.queue_size, self._timeout(timeout)))
        if not ok:
            raise ChannelTimeout(
                f"channel {self.name!r} key {key!r}: nothing received for {self._timeout(timeout):.0f} s; "
                "is its producer alive?"
            )
        kind = desc[0]
        if kind == "inline":
            return loads(desc[1], desc[2])
        if kind == "ray":
            return ray.get(desc[1])
        region, release = self._local().reader.read(desc[2], copy=copy)
        base = np.frombuffer(region, dtype=np.uint8)
        obj = loads(desc[1], [base[off : off + n] for off, n in desc[2].spans])
        if release is not None:
            # Decoded arrays keep `base` alive through their .base chain: free the segment
            # when the last of them is gone.
            weakref.finalize(base, release)
        return obj

    def qsize(self, key: str = "default") -> int:
        return ray.get(self._actor.qsize.remote(self._key(key), self.queue_size))

    # ---- lifetime
    def close(self) -> None:
        """Release this process's endpoint: unlink the segments it produced, drop mappings."""
        local = _LOCAL.pop(self.prefix, None)
        if local is not None:
            local.pool.close()
            local.reader.close()

    def shutdown(self) -> int:
        """Owner only: stop the queue actor (where this channel started it) and unlink every
        segment of this channel.

        Returns the number of segments that had to be swept (left by any process)."""
        self.close()
        if self._owns_actor:
            ray.kill(self._actor, no_restart=True)
        return shm.sweep(self.prefix)
