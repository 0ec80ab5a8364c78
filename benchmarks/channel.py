"""Shared-memory channel vs Ray object store: producer actor -> consumer actor, same host.

Payload: an observation-like batch of 64 x 2 x 224x224x3 uint8 images (19.3 MB) plus states
and instructions. Each repeat sends one message through the same `Channel` (same queue actor,
same descriptor path); only the payload route differs:
  ray        payload via ray.put / ray.get (the consumer gets read-only zero-copy views)
  shm        payload via a shared-memory segment, copied into consumer memory (writable)
  shm_view   payload via a shared-memory segment, zero-copy views (like Ray's)
Latency = consumer has the batch - producer starts put (CLOCK_MONOTONIC, same host).

    python benchmarks/channel.py [--repeats 30] [--batch 64]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import ray

import embodied_rl  # noqa: F401  (torchvision shim before anything else)
from embodied_rl.distributed.channel import Channel


@ray.remote(num_cpus=0)
class Producer:
    def __init__(self, batch: int):
        rng = np.random.default_rng(0)
        self.msg = {
            "main_images": rng.integers(0, 255, (batch, 2, 224, 224, 3), dtype=np.uint8),
            "states": rng.standard_normal((batch, 8), dtype=np.float32),
            "task_descriptions": ["pick up the cube"] * batch,
        }

    def send(self, channel: Channel, key: str) -> None:
        self.msg["t0"] = time.perf_counter()
        channel.put(self.msg, key)

    def close(self, channel: Channel) -> None:
        channel.close()


@ray.remote(num_cpus=0)
class Consumer:
    def recv(self, channel: Channel, key: str, copy: bool) -> float:
        msg = channel.get(key, copy=copy)
        latency = time.perf_counter() - msg["t0"]
        assert msg["main_images"].shape[1:] == (2, 224, 224, 3)
        del msg  # zero-copy: gives the segment back
        return latency

    def register(self, channel: Channel, key: str) -> None:
        channel.register_consumer(key)


def measure(channel: Channel, prod, cons, key: str, copy: bool, repeats: int) -> float:
    ray.get(cons.register.remote(channel, key))
    latencies = []
    for i in range(repeats + 3):  # 3 warm-up messages fill the segment pool / plasma
        pending = cons.recv.remote(channel, key, copy)
        ray.get(prod.send.remote(channel, key))
        lat = ray.get(pending)
        if i >= 3:
            latencies.append(lat)
    return statistics.median(latencies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    prod, cons = Producer.remote(args.batch), Consumer.remote()
    shm_ch = Channel.create("bench_shm", queue_size=1)
    ray_ch = Channel.create("bench_ray", queue_size=1, use_shm=False)
    nbytes = args.batch * 2 * 224 * 224 * 3
    print(f"payload {nbytes / 1e6:.1f} MB, {args.repeats} repeats, median latency:")
    # Interleave the modes twice so drift on a shared box hits all of them alike.
    results: dict[str, list[float]] = {"ray": [], "shm": [], "shm_view": []}
    for _ in range(2):
        results["ray"].append(measure(ray_ch, prod, cons, "b", True, args.repeats))
        results["shm"].append(measure(shm_ch, prod, cons, "b", True, args.repeats))
        results["shm_view"].append(measure(shm_ch, prod, cons, "v", False, args.repeats))
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"  {k:9s} {v * 1e3:8.2f} ms  ({nbytes / v / 1e9:5.2f} GB/s)")
    print(f"speedup shm (copy) vs ray object store:      {med['ray'] / med['shm']:.2f}x")
    print(f"speedup shm (zero-copy) vs ray object store: {med['ray'] / med['shm_view']:.2f}x")
    ray.get(prod.close.remote(shm_ch))
    leaked = shm_ch.shutdown() + ray_ch.shutdown()
    print(f"segments left after shutdown: {leaked} swept")


if __name__ == "__main__":
    main()
