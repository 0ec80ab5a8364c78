"""Channels: bit-exact shared-memory transfer, backpressure, no leaked segments."""
from __future__ import annotations

import time

import numpy as np
import pytest
import ray
import torch

from embodied_rl.distributed import shm
from embodied_rl.distributed.channel import Channel, ChannelTimeout
from embodied_rl.types import EnvObservation
from embodied_rl.workers.protocol import EnvStepMessage

pytestmark = pytest.mark.usefixtures("ray_session")


def make_message(seed: int = 0, n: int = 8) -> EnvStepMessage:
    rng = np.random.default_rng(seed)
    obs = EnvObservation(
        main_images=rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8),
        states=rng.standard_normal((n, 9)).astype(np.float32),
        task_descriptions=[f"pick up cube {i}" for i in range(n)],
        wrist_images=rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8),
    )
    return EnvStepMessage(env_rank=1, stage=0, step=3, obs=obs, truncations=rng.random((n, 8)) > 0.5,
                          rewards=rng.standard_normal((n, 8)).astype(np.float32),
                          dones=rng.random((n, 8)) > 0.9)


def assert_same(a: EnvStepMessage, b: EnvStepMessage) -> None:
    for name in ("main_images", "states", "wrist_images"):
        x, y = getattr(a.obs, name), getattr(b.obs, name)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    assert a.obs.task_descriptions == b.obs.task_descriptions
    for name in ("truncations", "rewards", "dones"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
    assert (a.env_rank, a.stage, a.step, a.final_obs) == (b.env_rank, b.stage, b.step, b.final_obs)


@ray.remote(num_cpus=0)
class Peer:
    def put(self, ch: Channel, item, key: str, n: int = 1) -> int:
        for _ in range(n):
            ch.put(item, key)
        return n

    def get(self, ch: Channel, key: str, copy: bool = True):
        return ch.get(key, copy=copy)

    def get_and_hold(self, ch: Channel, key: str) -> int:
        self.held = ch.get(key, copy=False)  # zero-copy views pin the segment
        return int(self.held.obs.main_images.sum())

    def register(self, ch: Channel, key: str) -> None:
        ch.register_consumer(key)


@pytest.fixture(scope="module")
def peers():
    """One producer and one consumer actor reused by the tests (actor start-up is seconds)."""
    pair = Peer.remote(), Peer.remote()
    yield pair
    for a in pair:
        ray.kill(a)


@pytest.fixture()
def channel():
    ch = Channel.create("test", queue_size=2, timeout_s=30.0)
    yield ch
    ch.shutdown()


def test_batch_survives_shared_memory_bit_exact(channel, peers):
    producer, consumer = peers
    ray.get(consumer.register.remote(channel, "k"))
    msg = make_message()
    ray.get(producer.put.remote(channel, msg, "k"))
    assert shm.list_segments(channel.prefix), "payload should sit in a shared-memory segment"
    assert_same(ray.get(consumer.get.remote(channel, "k")), msg)
    tensors = {"bf16": torch.randn(4, 300, dtype=torch.bfloat16), "i64": torch.arange(20000).reshape(2, -1)}
    ray.get(producer.put.remote(channel, tensors, "k"))
    got = ray.get(consumer.get.remote(channel, "k", False))
    assert got["bf16"].dtype == torch.bfloat16 and torch.equal(got["bf16"], tensors["bf16"])
    assert torch.equal(got["i64"], tensors["i64"])


def test_object_store_fallback_for_consumers_on_other_nodes(channel):
    # A consumer registered from another node id makes producers use Ray's object store.
    ray.get(channel._actor.register_consumer.remote(channel._key("remote"), "some-other-node-id"))
    msg = make_message(1)
    channel.put(msg, "remote")
    assert not shm.list_segments(channel.prefix)
    assert_same(channel.get("remote"), msg)
    ray_only = Channel.create("ray_only", queue_size=0, use_shm=False)
    ray_only.put(msg, "k")
    assert_same(ray_only.get("k"), msg)
    assert ray_only.shutdown() == 0


def test_two_channels_share_one_queue_actor_with_their_own_keys_and_bounds(ray_session):
    owner = Channel.create("obs", queue_size=1, timeout_s=30.0)
    guest = Channel.create("actions", queue_size=0, timeout_s=30.0, host=owner)
    assert guest._actor == owner._actor
    owner.put(make_message(1), "k")
    for i in range(3):  # unbounded, and the same key name is another queue
        guest.put(make_message(2 + i), "k")
    with pytest.raises(ChannelTimeout, match="queue full"):
        owner.put(make_message(9), "k", timeout=0.2)
    assert (owner.qsize("k"), guest.qsize("k")) == (1, 3)
    assert_same(owner.get("k"), make_message(1))
    assert_same(guest.get("k"), make_message(2))
    guest.shutdown()  # a guest leaves the actor to its owner
    assert owner.qsize("k") == 0
    owner.shutdown()


def test_bounded_queue_applies_backpressure(channel, peers):
    producer = peers[0]
    channel.register_consumer("bp")
    small = {"x": np.arange(10)}
    done = producer.put.remote(channel, small, "bp", 3)  # queue_size=2: the 3rd put must block
    deadline = time.monotonic() + 20
    while channel.qsize("bp") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    ready, _ = ray.wait([done], timeout=1.0)
    assert channel.qsize("bp") == 2 and not ready, "producer should be blocked on the full queue"
    assert channel.get("bp")["x"].tolist() == list(range(10))
    assert ray.get(done, timeout=20) == 3
    with pytest.raises(ChannelTimeout, match="queue full"):
        channel.put(small, "bp", timeout=0.2)
    unbounded = Channel.create("unbounded", queue_size=0)
    for _ in range(5):
        unbounded.put(small, "k", timeout=1.0)
    assert unbounded.qsize("k") == 5
    unbounded.shutdown()


def test_get_timeout_names_channel_and_key(channel):
    with pytest.raises(ChannelTimeout, match="channel 'test' key 'nobody'"):
        channel.get("nobody", timeout=0.1)


def test_dead_consumer_leaks_no_segments(peers):
    ch = Channel.create("leak", queue_size=0)
    producer, consumer = peers[0], Peer.remote()
    ray.get(consumer.register.remote(ch, "k"))
    ray.get(producer.put.remote(ch, make_message(2), "k", 3))  # 3 segments in flight
    assert ray.get(consumer.get_and_hold.remote(ch, "k")) > 0
    ray.kill(consumer)  # dies holding one message, two more never read
    assert len(shm.list_segments(ch.prefix)) == 3
    ch.shutdown()  # the owner sweeps everything under the channel prefix
    assert shm.list_segments(ch.prefix) == []


def test_segments_are_reused_not_leaked(channel):
    channel.register_consumer("r")
    for i in range(6):
        channel.put(make_message(i), "r")
        assert_same(channel.get("r"), make_message(i))
    assert len(shm.list_segments(channel.prefix)) == 1


def test_single_channel_wiring_uses_it_for_every_direction(channel):
    from embodied_rl.workers.protocol import ChannelWiring

    wiring = ChannelWiring.of(channel)
    assert wiring.obs is wiring.actions is wiring.trajectories is channel
    assert ChannelWiring.of(wiring) is wiring
