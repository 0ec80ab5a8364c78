"""HF vs vLLM rollout forward throughput: `predict` (one pass + sampling + values) of the policy
each `rollout.backend` serves, on the same checkpoint and observations, in one process.

For each batch size B: median wall time over --repeats calls (after one warm-up), each on new
observations, for each backend, observations per second, and the ratio vLLM/HF of the times measured in this run; plus
the engine's start time, one full weight sync, and the max abs diff of the bin logits. Both
backends are built through models/rollout_backends.py, as the rollout workers build them.

    # CPU, tiny preset (needs `bash scripts/setup.sh --vllm`):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_backends.py --preset tiny --image-size 64
    # GPU, real-size preset (engine in fp32; not run here):
    OMP_NUM_THREADS=8 .venv/bin/python benchmarks/rollout_backends.py --preset openvla-7b --image-size 224 --batches 1,8,32,64 --repeats 11
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

import embodied_rl  # noqa: F401  (torchvision shim before anything else)
from embodied_rl.config.schema.model import model_config
from embodied_rl.models.create import create_model
from embodied_rl.models.rollout_backends import build_rollout_policy
from embodied_rl.types import EnvObservation


def median_ms(fn: Callable[[int], object], repeats: int) -> float:
    """Median of fn(1..repeats) after the warm-up fn(0)."""
    fn(0)
    times = []
    for i in range(1, repeats + 1):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def observation(n: int, image_size: int, seed: int) -> EnvObservation:
    rng = np.random.default_rng([n, seed])
    return EnvObservation(main_images=rng.integers(0, 256, (n, image_size, image_size, 3), dtype=np.uint8),
                          states=np.zeros((n, 8), np.float32), task_descriptions=["pick up the red cube"] * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:
        parser.error("set OMP_NUM_THREADS (both backends then use the same thread count)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = create_model(args.preset, f"{tmp}/ckpt", image_size=args.image_size).path
        cfg = model_config("openvla_oft", model_path=str(path), unnorm_key="identity", add_value_head=True)
        hf = build_rollout_policy("huggingface", cfg, device=device)
        t = time.perf_counter()
        engine = build_rollout_policy("vllm", cfg, device=device)
        result: dict[str, object] = {
            "preset": args.preset, "image_size": args.image_size, "device": str(device),
            "omp_threads": os.environ["OMP_NUM_THREADS"], "repeats": args.repeats,
            "engine_start_s": round(time.perf_counter() - t, 2), "attention": engine.attention,
            "load_avg_1m_before": os.getloadavg()[0]}
        print(f"{'B':>3} {'HF ms':>9} {'vLLM ms':>9} {'vLLM/HF':>8} {'HF obs/s':>9} {'vLLM obs/s':>10} {'logits diff':>11}")
        for b in batches:
            # New images on every call, as in a rollout: vLLM would otherwise serve repeated images
            # from its encoder cache and skip the vision towers.
            batches_in = [{k: v.to(device) for k, v in hf.prepare_inputs(observation(b, args.image_size, i)).items()}
                          for i in range(args.repeats + 2)]
            with torch.no_grad():
                hf_ms = median_ms(lambda i, x=batches_in: hf.predict(x[i], do_sample=True), args.repeats)
                ref = hf._logits_and_values(batches_in[-1], False)[0]
            vllm_ms = median_ms(lambda i, x=batches_in: engine.predict(x[i], do_sample=True), args.repeats)
            diff = float((engine.logits_and_hidden(batches_in[-1])[0] - ref.float().cpu()).abs().max())
            row = {"hf_ms": round(hf_ms, 2), "vllm_ms": round(vllm_ms, 2), "vllm_over_hf": round(vllm_ms / hf_ms, 3),
                   "hf_obs_per_s": round(1000 * b / hf_ms, 1), "vllm_obs_per_s": round(1000 * b / vllm_ms, 1),
                   "logits_max_abs_diff": diff}
            result[f"B{b}"] = row
            print(f"{b:>3} {hf_ms:>9.2f} {vllm_ms:>9.2f} {row['vllm_over_hf']:>8.3f} {row['hf_obs_per_s']:>9.1f} "
                  f"{row['vllm_obs_per_s']:>10.1f} {diff:>11.1e}", flush=True)
        sd = hf.trainable_state_dict()
        result["weight_sync_ms"] = round(median_ms(lambda i: engine.load_trainable_state_dict(sd), 5), 2)
        result["load_avg_1m_after"] = os.getloadavg()[0]
        engine.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
