"""Weight sync: the receiver's peak memory, whole state dict vs buckets in the rollout's dtype.

The `small` preset (~46M parameters) is the actor's policy in fp32 in the driver; a receiver
(a Ray actor: its own process, as a rollout worker is) holds the same policy in bf16. Routes:
  whole fp32     the route before buckets: one object-store object holding the whole fp32
                 state dict, fetched whole, then loaded
  whole bf16     the same, cast to bf16 by the sender
  buckets bf16   make_buckets(..., bf16, --bucket-mb) objects, fetched and loaded one at a time
                 (received_buckets + load_trainable_buckets: the rollout worker's code)
Per route and repeat the receiver resets its peak RSS (/proc/self/clear_refs) and reports
peak minus the RSS before the sync (after malloc_trim): the memory the sync added. Median over repeats; the ratio
whole fp32 / buckets bf16 is printed, and the load time of each route.

    python benchmarks/weight_sync_buckets.py [--bucket-mb 16] [--repeats 3] [--preset small]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch

from embodied_rl.config.schema.model import model_config
from embodied_rl.distributed.weight_sync import make_buckets, nbytes, received_buckets
from embodied_rl.models import build_policy
from embodied_rl.models.create import create_model


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _cfg(path: Path, precision: str):
    cfg = model_config("openvla_oft", model_path=str(path), add_value_head=True, value_type="chunk_level")
    cfg.precision = precision
    return cfg


@ray.remote(num_cpus=1)
class Receiver:
    def __init__(self, path: str) -> None:
        torch.set_num_threads(1)
        self.policy = build_policy(_cfg(Path(path), "bf16"), warn_untrained_value_head=False)

    def load(self, weights: dict | list) -> tuple[float, float]:
        """(MiB the sync added at its peak, seconds); `weights` as the rollout worker gets it."""
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, or an earlier route's pages hide this one's growth
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        t0 = time.perf_counter()
        self.policy.load_trainable_buckets(received_buckets(weights))
        seconds = time.perf_counter() - t0
        return (_status_kib("VmHWM") - before) / 1024, seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket-mb", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="small", help="model preset (tiny: a smoke run of the code path)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sync_bench_"))
    path = create_model(args.preset, work / args.preset, image_size=64, seed=0).path
    sd = build_policy(_cfg(path, "fp32"), warn_untrained_value_head=False).trainable_state_dict()
    total = sum(nbytes(v) for v in sd.values())
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=4 * total + 2**28)
    receiver = Receiver.remote(str(path))
    routes = {
        # A one-bucket list: fetched inside the measured call, as Ray resolves the old route's
        # top-level reference just before it (the same memory, in the same process).
        "whole fp32": [ray.put({k: v.clone() for k, v in sd.items()})],
        "whole bf16": [ray.put({k: v.to(torch.bfloat16) for k, v in sd.items()})],
        "buckets bf16": [ray.put(b) for b in make_buckets(sd.items(), torch.bfloat16, args.bucket_mb * 2**20)],
    }
    ray.get(receiver.load.remote(routes["whole bf16"]))  # warm-up: first-touch pages of the policy and allocator
    peaks: dict[str, list[float]] = {r: [] for r in routes}
    times: dict[str, list[float]] = {r: [] for r in routes}
    for _ in range(args.repeats):
        for route, weights in routes.items():
            mib, seconds = ray.get(receiver.load.remote(weights))
            peaks[route].append(mib)
            times[route].append(seconds)
    n_buckets = len(routes["buckets bf16"])
    print(f"{args.preset} preset: {total / 2**20:.1f} MiB of trainable fp32 weights; {n_buckets} buckets of <= {args.bucket_mb} MiB "
          f"in bf16; receiver in bf16; median of {args.repeats}")
    med = {r: statistics.median(v) for r, v in peaks.items()}
    for route in routes:
        print(f"  {route:13s} receiver peak +{med[route]:7.1f} MiB   load {statistics.median(times[route]) * 1e3:7.1f} ms")
    print(f"receiver peak, whole fp32 / buckets bf16: {med['whole fp32'] / max(med['buckets bf16'], 1e-9):.1f}x")
    ray.shutdown()


if __name__ == "__main__":
    main()
