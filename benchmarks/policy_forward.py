"""Rollout forward pass of the OpenVLA-OFT policy: latency, throughput, peak memory, FLOP/s.

CPU (default): the tiny preset; prints per-sample latency at batch B relative to B=1
(the baseline, measured in the same run).
GPU (`--device cuda`): the openvla-7b preset with random weights in bf16, 2 cameras,
B = 8..64; prints achieved FLOP/s (counted analytically from the config) as a fraction of
the GPU's dense bf16 peak.

    python benchmarks/policy_forward.py                      # CPU, tiny, 224 px, 1 camera
    python benchmarks/policy_forward.py --device cuda        # GPU, openvla-7b, bf16, 2 cameras
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
import torch

import embodied_rl  # noqa: F401  (torchvision shim before timm)
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy
from embodied_rl.types import EnvObservation

# Dense bf16 tensor-core peaks (FLOP/s) by device-name substring, from the vendors' datasheets.
BF16_PEAK = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12}


def vit_flops(tower: torch.nn.Module, n_blocks: int) -> float:
    """Forward FLOPs of one image through patch embedding + the first n_blocks blocks (2 per MAC)."""
    d = int(tower.embed_dim)
    n = int(tower.patch_embed.num_patches) + int(tower.num_prefix_tokens)
    k = int(np.prod(tower.patch_embed.proj.weight.shape[1:]))
    mlp = int(tower.blocks[0].mlp.fc1.out_features)
    per_block = 2 * n * d * 3 * d + 2 * n * d * d + 4 * n * n * d + 4 * n * d * mlp
    return 2.0 * (n - tower.num_prefix_tokens) * k * d + n_blocks * per_block


def forward_flops(policy: OpenVLAOFTPolicy, prompt_len: int) -> float:
    """FLOPs of one sample's rollout forward (vision, projector, LLM over the whole sequence, readout head)."""
    core, cfg = policy.vla, policy.model_cfg
    vb = core.vision_backbone
    n_img, p = cfg.num_images_in_input, vb.num_patches_per_image
    vision = n_img * sum(vit_flops(t, len(t.blocks) - 1) for t in vb.towers)
    proj = sum(2 * m.in_features * m.out_features for m in core.projector.modules() if isinstance(m, torch.nn.Linear))
    tc = core.arch.llama_config()
    h, i, layers, v = tc.hidden_size, tc.intermediate_size, tc.num_hidden_layers, tc.vocab_size
    kv = h * tc.num_key_value_heads // tc.num_attention_heads
    t = cfg.num_action_tokens
    s = prompt_len + n_img * p + int(cfg.use_proprio) + t + int(cfg.append_stop_token)
    per_layer = 2 * s * (2 * h * h + 2 * h * kv) + 4 * s * s * h + 6 * s * h * i
    return vision + n_img * p * proj + layers * per_layer + 2 * t * h * v


def make_obs(b: int, size: int, n_img: int, seed: int = 0) -> EnvObservation:
    rng = np.random.default_rng(seed)
    img = lambda: rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8)
    return EnvObservation(main_images=img(), wrist_images=img() if n_img > 1 else None,
                          states=np.zeros((b, 8), np.float32),
                          task_descriptions=["put the black bowl on the plate"] * b)


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB; process high-water mark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--preset", default=None, help="tiny | openvla-7b (default: tiny on CPU, openvla-7b on CUDA)")
    ap.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"], help="default: fp32 on CPU, bf16 on CUDA")
    ap.add_argument("--batch-sizes", default=None, help="comma list (default: 1,2,4,8,16 on CPU; 8,16,32,64 on CUDA)")
    ap.add_argument("--num-images", type=int, default=None, help="cameras (default: 1 on CPU, 2 on CUDA)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--chunks", type=int, default=8, help="num_action_chunks (x 7 action dims)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager", "flash_attention_2"])
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the bf16 peak used for the fraction")
    args = ap.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    preset = args.preset or ("openvla-7b" if cuda else "tiny")
    precision = args.dtype or ("bf16" if cuda else "fp32")
    n_img = args.num_images or (2 if cuda else 1)
    sizes = [int(x) for x in (args.batch_sizes or ("8,16,32,64" if cuda else "1,2,4,8,16")).split(",")]
    torch.manual_seed(0)
    cfg = OpenVLAOFTConfig(model_path="(random init)", num_images_in_input=n_img, num_action_chunks=args.chunks,
                      precision=precision, attn_implementation=args.attn, add_value_head=True)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    t0 = time.perf_counter()
    policy = OpenVLAOFTPolicy.from_preset(preset, cfg, device=device, dtype=dtype, image_size=args.image_size).eval()
    n_params = sum(p.numel() for p in policy.parameters())
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else next((v for k, v in BF16_PEAK.items() if k in name), None) if cuda else None
    print(f"# {preset}: {n_params / 1e6:.1f}M params, {precision}, {n_img} image(s) {args.image_size}px, "
          f"{args.chunks}x7 action tokens, attn={args.attn}, device={name} ({torch.get_num_threads()} threads), built in {time.perf_counter() - t0:.1f}s")
    base_mem = peak_bytes(device)
    print(f"{'B':>4} {'prep ms':>9} {'fwd ms':>9} {'ms/sample':>10} {'vs B=1':>7} {'samples/s':>10} {'peak MiB':>9} {'TFLOP/s':>8} {'of peak':>8}")
    per_sample_1 = None
    for b in sizes:
        inputs = policy.prepare_inputs(make_obs(b, args.image_size, n_img))
        t_prep = time.perf_counter()
        policy.prepare_inputs(make_obs(b, args.image_size, n_img, seed=1))
        prep_ms = (time.perf_counter() - t_prep) * 1e3
        inputs = {k: v.to(device) for k, v in inputs.items()}
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        with torch.no_grad():
            for it in range(args.iters + 1):  # first iteration is warm-up
                if cuda:
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                policy.predict(inputs, do_sample=True, temperature=1.0)
                if cuda:
                    torch.cuda.synchronize(device)
                if it:
                    times.append(time.perf_counter() - start)
        sec = statistics.median(times)
        per_sample = sec / b
        per_sample_1 = per_sample_1 or per_sample
        mem = (peak_bytes(device) if cuda else max(peak_bytes(device) - base_mem, 0)) / 2**20
        flops = forward_flops(policy, inputs["input_ids"].shape[1]) * b / sec
        frac = f"{flops / peak:8.1%}" if peak else f"{'n/a':>8}"
        print(f"{b:>4} {prep_ms:9.1f} {sec * 1e3:9.1f} {per_sample * 1e3:10.2f} {per_sample / per_sample_1:7.2f} "
              f"{b / sec:10.1f} {mem:9.0f} {flops / 1e12:8.3f} {frac}")
    print("# 'vs B=1' = per-sample latency at B / per-sample latency at the first batch size (lower = batching helps);"
          + (" peak MiB = torch.cuda.max_memory_allocated" if cuda else " peak MiB = growth of the process RSS high-water mark over the loaded model"))


if __name__ == "__main__":
    main()
