"""Weight sync, actor -> rollout workers: through the driver vs by object-store reference.

A source actor holds a state dict of `--mb` MB of fp32 tensors (the trainable weights after an
update); `--consumers` actors load it (copy into their own tensors). Per repeat:
  driver      the driver gets the tensors from the source (ray.get) and sends them to every
              consumer as an argument (the route before the data plane moved off the driver)
  reference   the source puts the tensors in its object store and returns the reference; the
              driver passes only that to the consumers, who fetch the tensors themselves
Time = from the driver's request to every consumer having loaded, median over repeats (routes
interleaved). The ratio driver / reference is printed; the driver's received bytes too.

    python benchmarks/weight_sync.py [--mb 256] [--consumers 2] [--repeats 8]
"""
from __future__ import annotations

import argparse
import statistics
import time

import ray
import torch

from embodied_rl.distributed.traffic import payload_bytes


@ray.remote(num_cpus=0)
class Source:
    def __init__(self, mb: int) -> None:
        n = mb * 2**20 // 4 // 8
        self.sd = {f"layer{i}.weight": torch.randn(n) for i in range(8)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.sd

    def shared(self) -> list[ray.ObjectRef]:
        return [ray.put(self.sd)]


@ray.remote(num_cpus=0)
class Consumer:
    def __init__(self) -> None:
        self.sd: dict[str, torch.Tensor] = {}

    def load(self, sd: dict[str, torch.Tensor]) -> int:
        self.sd = {k: v.clone() for k, v in sd.items()}  # what load_state_dict's copy costs
        return len(self.sd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=4 * args.mb * 2**20 + 2**30)
    source = Source.remote(args.mb)
    consumers = [Consumer.remote() for _ in range(args.consumers)]
    ray.get([c.load.remote({}) for c in consumers])
    times: dict[str, list[float]] = {"driver": [], "reference": []}
    received: dict[str, int] = {}
    for _ in range(args.repeats + 1):  # the first round warms both routes up
        for route, samples in times.items():
            t0 = time.perf_counter()
            if route == "driver":
                got = ray.get(source.state_dict.remote())
                ray.get([c.load.remote(got) for c in consumers])
            else:
                got = ray.get(source.shared.remote())
                ray.get([c.load.remote(got[0]) for c in consumers])
            samples.append(time.perf_counter() - t0)
            received[route] = payload_bytes(got)
            del got
    med = {route: statistics.median(t[1:]) for route, t in times.items()}
    print(f"state dict {args.mb} MB fp32, {args.consumers} consumers, {args.repeats} repeats (median)")
    for route, seconds in med.items():
        print(f"  {route:9s} {seconds * 1e3:8.1f} ms   driver received {received[route] / 2**20:8.2f} MB")
    print(f"driver route / reference route: {med['driver'] / med['reference']:.2f}x")
    ray.shutdown()


if __name__ == "__main__":
    main()
