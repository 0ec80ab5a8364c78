"""HF vs vLLM rollout forward (predict: one pass + sampling + values) on the CPU, tiny preset.

For each batch size B: median wall time of `predict` over --repeats calls (after one warm-up),
for the HF policy and the vLLM engine on the same checkpoint and inputs; plus the engine's
start time, the time of one full weight sync, and the max abs diff of the bin logits.
Run it with a Python that has vLLM (see docs/VLLM_BACKEND_STATUS.md):

    OMP_NUM_THREADS=2 python benchmarks/rollout_backends.py [--batches 1,8,32,64] [--repeats 15]

The engine is CPU/fp32-only for now, so there is no real-size (7B, GPU) variant yet.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np
import torch

import embodied_rl  # noqa: F401  (torchvision shim before anything else)
from embodied_rl.config.schema.model import model_config
from embodied_rl.models.create import create_model
from embodied_rl.models.registry import build_policy
from embodied_rl.types import EnvObservation


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1000 * statistics.median(times), 2)


def observation(n: int, image_size: int) -> EnvObservation:
    rng = np.random.default_rng(n)
    return EnvObservation(main_images=rng.integers(0, 256, (n, image_size, image_size, 3), dtype=np.uint8),
                          states=np.zeros((n, 8), np.float32), task_descriptions=["pick up the red cube"] * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--image-size", type=int, default=64)
    args = parser.parse_args()
    from embodied_rl.models.openvla_oft.vllm.engine import VLLMOpenVLAOFT

    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = create_model("tiny", f"{tmp}/ckpt", image_size=args.image_size).path
        cfg = model_config("openvla_oft", model_path=str(path), unnorm_key="identity", add_value_head=True)
        hf = build_policy(cfg, warn_untrained_value_head=False).eval()
        t = time.perf_counter()
        engine = VLLMOpenVLAOFT(path, cfg, max_num_seqs=max(batches))
        result: dict[str, object] = {"omp_threads": os.environ["OMP_NUM_THREADS"], "engine_start_s": round(time.perf_counter() - t, 2),
                                     "attention": engine.attention, "load_avg_1m": os.getloadavg()[0]}
        for b in batches:
            inputs = hf.prepare_inputs(observation(b, args.image_size))
            with torch.no_grad():
                hf_ms = median_ms(lambda inputs=inputs: hf.predict(inputs, do_sample=True), args.repeats)
                ref = hf._logits_and_values(inputs, False)[0]
            vllm_ms = median_ms(lambda inputs=inputs: engine.predict(inputs, do_sample=True), args.repeats)
            diff = float((engine.logits_and_hidden(inputs)[0] - ref).abs().max())
            result[f"B{b}"] = {"hf_ms": hf_ms, "vllm_ms": vllm_ms, "logits_max_abs_diff": diff}
        sd = hf.trainable_state_dict()
        result["weight_sync_ms"] = median_ms(lambda: engine.load_trainable_state_dict(sd), 5)
        engine.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
