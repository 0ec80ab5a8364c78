"""Shared-memory channel vs Ray object store: producer actor -> consumer actor, same host.

Payload: an observation-like batch of 64 x 2 x 224x224x3 uint8 images (19.3 MB) plus states
and instructions. Each repeat sends one message through the same `Channel` (same queue actor,
same descriptor path); only the payload route differs:
  ray        payload via ray.put / ray.get (the consumer gets read-only zero-copy views)
  shm        payload via a shared-memory segment, copied into consumer memory (writable)
  shm_view   payload via a shared-memory segment, zero-copy views (like Ray's)
Latency = consumer has the batch - producer starts put (CLOCK_MONOTONIC, same host).

`--nodes 2`: the routes a run across nodes takes, on a real cluster of two raylets on this
machine (`ray.cluster_utils.Cluster`: each its own node id and object store). The producer sits
on node 0; one consumer on node 0, one on node 1; all get(copy=False) like the rollout worker:
  same_node_shm   the channel's route to a consumer on the producer's node
  same_node_ray   the object store within one node (the route without /dev/shm)
  cross_node_ray  the channel's route to a consumer on another node: Ray transfers the
                  object from node 0's store to node 1's (here over loopback)

    python benchmarks/channel.py [--repeats 30] [--batch 64] [--nodes 1|2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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

    def route_counts(self, channel: Channel) -> dict[str, float]:
        return {k: v for k, v in channel.take_counts("bench").items() if k.endswith("_messages")}


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
    ap.add_argument("--nodes", type=int, choices=(1, 2), default=1)
    args = ap.parse_args()
    nbytes = args.batch * 2 * 224 * 224 * 3
    print(f"payload {nbytes / 1e6:.1f} MB, {args.repeats} repeats, median latency:")
    (one_node if args.nodes == 1 else two_nodes)(args, nbytes)


def _report(results: dict[str, list[float]], nbytes: int) -> dict[str, float]:
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"  {k:14s} {v * 1e3:8.2f} ms  ({nbytes / v / 1e9:5.2f} GB/s)")
    return med


def one_node(args: argparse.Namespace, nbytes: int) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    prod, cons = Producer.remote(args.batch), Consumer.remote()
    shm_ch = Channel.create("bench_shm", queue_size=1)
    ray_ch = Channel.create("bench_ray", queue_size=1, use_shm=False)
    # Interleave the modes twice so drift on a shared box hits all of them alike.
    results: dict[str, list[float]] = {"ray": [], "shm": [], "shm_view": []}
    for _ in range(2):
        results["ray"].append(measure(ray_ch, prod, cons, "b", True, args.repeats))
        results["shm"].append(measure(shm_ch, prod, cons, "b", True, args.repeats))
        results["shm_view"].append(measure(shm_ch, prod, cons, "v", False, args.repeats))
    med = _report(results, nbytes)
    print(f"speedup shm (copy) vs ray object store:      {med['ray'] / med['shm']:.2f}x")
    print(f"speedup shm (zero-copy) vs ray object store: {med['ray'] / med['shm_view']:.2f}x")
    ray.get(prod.close.remote(shm_ch))
    leaked = shm_ch.shutdown() + ray_ch.shutdown()
    print(f"segments left after shutdown: {leaked} swept")


def two_nodes(args: argparse.Namespace, nbytes: int) -> None:
    from ray.cluster_utils import Cluster

    store = max(4 * nbytes, 200 * 2**20)  # room for a few batches in each node's object store
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": store})
    cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=True)
    try:
        head, other = (n["NodeID"] for n in sorted(ray.nodes(), key=lambda n: "node:__internal_head__" not in n["Resources"]))

        def on(node: str):
            return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}

        prod = Producer.options(**on(head)).remote(args.batch)
        near, far = Consumer.options(**on(head)).remote(), Consumer.options(**on(other)).remote()
        shm_ch = Channel.create("bench_nodes", queue_size=1)
        ray_ch = Channel.create("bench_nodes_ray", queue_size=1, use_shm=False)
        cases = {"same_node_shm": (shm_ch, near, "near"), "same_node_ray": (ray_ch, near, "near"),
                 "cross_node_ray": (shm_ch, far, "far")}
        results: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(2):
            for name, (channel, cons, key) in cases.items():
                results[name].append(measure(channel, prod, cons, key, False, args.repeats))
        routes = ray.get(prod.route_counts.remote(shm_ch))
        med = _report(results, nbytes)
        print(f"cross-node object store vs same-node shared memory: {med['cross_node_ray'] / med['same_node_shm']:.2f}x slower")
        print(f"cross-node vs same-node object store:               {med['cross_node_ray'] / med['same_node_ray']:.2f}x slower")
        print(f"routes taken by the shared-memory channel: {routes}")
        ray.get(prod.close.remote(shm_ch))
        print(f"segments left after shutdown: {shm_ch.shutdown() + ray_ch.shutdown()} swept")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
