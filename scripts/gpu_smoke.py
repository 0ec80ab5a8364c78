"""GPU smoke: the GPU paths of the policy and the actor, on one device, in minutes.

Made for a bare single-GPU machine (PyTorch, transformers, peft, timm, safetensors; no Ray,
ManiSkill, vLLM, flash-attn or network): it imports only the parts of embodied_rl that need
nothing else, builds its configs as dataclasses and its data synthetically. `--cpu` runs the
same checks on the CPU (CI runs them so the script cannot rot). One line per check
(PASS / FAIL / SKIP with the reason and the device's peak memory), then a summary; exit 1 if
any check failed.

Checks, in order (each builds on the model the first one writes):
  packages     what is installed; the checks that need a missing package say so and skip
  forward      the tiny preset in bf16 on the device against fp32 on the CPU: log-probs of the
               same tokens and greedy tokens agree; a backward leaves finite gradients
  sampling     one worker's per-device generators sample the device's logits and CPU logits (a
               vLLM engine's) alike; a restored state repeats both streams
  ppo_update   ActorWorker (FSDP2, one rank, the device's process group) runs two PPO training
               steps on a rollout batch made by the policy: finite metrics, weights moved
  sft_step     three SFT steps of the same worker on synthetic demo samples: the NLL falls
  export       the trained weights gathered, exported in the official layout, rebuilt on the
               device: the same log-probs as the trained policy
  weight_sync  the trained weights in bf16 buckets, streamed to a second process that loads
               them one at a time into a bf16 policy on the device: its weights equal the
               actor's cast to bf16; its device memory grew by about one bucket, not the dict
  meta_init    the actor's policy built on the meta device and loaded shard by shard equals
               the eager build and sharding; on a GPU, the peak device memory of both builds

    bash scripts/gpu_smoke.sh [--cpu] [--keep DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import math
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from embodied_rl.config.schema import RootConfig
from embodied_rl.models import build_policy
from embodied_rl.models.create import create_model
from embodied_rl.types import EnvObservation
from tests.rollout_batch import make_rollout_batch

IMAGE = 64  # camera pixels of the tiny preset the smoke writes
OPTIONAL = ("ray", "mani_skill", "vllm", "flash_attn", "transformers", "peft", "timm", "safetensors")


# The second process of weight_sync: reads length-prefixed buckets (torch.save) from stdin and
# loads them one at a time into a bf16 policy on the device, as a rollout worker does; writes
# back (its trainable weights, its device memory growth at peak or None on the CPU).
RECEIVER = """
import io, struct, sys, torch
sys.path.insert(0, '.')
from embodied_rl.config.schema.model import model_config
from embodied_rl.models import build_policy
cfg = model_config('openvla_oft', model_path=sys.argv[1], add_value_head=True, value_type='chunk_level')
cfg.precision = 'bf16'
device = torch.device(sys.argv[2])
policy = build_policy(cfg, device=device, warn_untrained_value_head=False)
cuda = device.type == 'cuda'
if cuda:
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
def buckets(stream):
    while header := stream.read(8):
        (n,) = struct.unpack('<Q', header)
        yield torch.load(io.BytesIO(stream.read(n)), weights_only=True)  # CPU, as from the object store
policy.load_trainable_buckets(buckets(sys.stdin.buffer))
grew = torch.cuda.max_memory_allocated(device) - start if cuda else None
out = io.BytesIO()
torch.save(({k: v.cpu() for k, v in policy.trainable_state_dict().items()}, grew), out)
sys.stdout.buffer.write(out.getvalue())
"""


def _frame(stream: io.BytesIO, bucket: dict[str, torch.Tensor]) -> None:
    buf = io.BytesIO()
    torch.save(bucket, buf)
    stream.write(struct.pack("<Q", buf.tell()))
    stream.write(buf.getvalue())


class Skip(Exception):
    """A check that cannot run here (a missing package or device), with the reason."""


class Smoke:
    def __init__(self, device: torch.device, work: Path) -> None:
        self.device, self.work = device, work
        self.model_dir = work / "tiny-oft"
        self.worker = None

    # ---- helpers -------------------------------------------------------------------
    def model_cfg(self, precision: str = "fp32"):
        cfg = self.root_cfg().actor.model
        cfg.precision = precision
        return cfg

    def root_cfg(self) -> RootConfig:
        """Schema defaults (PPO, GAE) with every interpolated default set, as the loader would."""
        cfg = RootConfig()
        cfg.runner.seed = cfg.actor.seed = 7
        cfg.runner.max_steps = 5
        m = cfg.actor.model
        m.model_path = cfg.rollout.model.model_path = str(self.model_dir)
        m.add_value_head, m.value_type = True, "chunk_level"
        cfg.actor.fsdp_config.mixed_precision.param_dtype = "bf16" if self.device.type == "cuda" else "fp32"
        cfg.actor.global_batch_size, cfg.actor.micro_batch_size = 8, 4
        cfg.actor.optim.clip_grad = 1.0
        return cfg

    def observations(self, n: int, seed: int = 0) -> EnvObservation:
        rng = np.random.default_rng(seed)
        return EnvObservation(main_images=rng.integers(0, 256, size=(n, IMAGE, IMAGE, 3), dtype=np.uint8),
                              states=rng.standard_normal((n, 8)).astype(np.float32),
                              task_descriptions=["push the cube to the target"] * n)

    def peak(self) -> str:
        if self.device.type != "cuda":
            return ""
        gib = torch.cuda.max_memory_allocated(self.device) / 2**30
        torch.cuda.reset_peak_memory_stats(self.device)
        return f" (peak {gib:.2f} GiB)"

    # ---- checks --------------------------------------------------------------------
    def packages(self) -> str:
        have = [m for m in OPTIONAL if importlib.util.find_spec(m) is not None]
        missing = [m for m in OPTIONAL if m not in have]
        where = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "CPU"
        return f"torch {torch.__version__} on {where}; present: {', '.join(have) or '-'}; absent: {', '.join(missing) or '-'}"

    def forward(self) -> str:
        create_model("tiny", self.model_dir, image_size=IMAGE, seed=0)
        ref = build_policy(self.model_cfg("fp32"), device="cpu", dtype=torch.float32, warn_untrained_value_head=False).eval()
        dut = build_policy(self.model_cfg("bf16"), device=self.device, dtype=torch.bfloat16, warn_untrained_value_head=False).eval()
        obs = self.observations(8)
        with torch.no_grad():
            ref_in = ref.prepare_inputs(obs)
            greedy_ref = ref.predict(ref_in, do_sample=False, compute_values=False).action_record
            dut_in = {k: v.to(self.device) for k, v in dut.prepare_inputs(obs).items()}
            greedy_dut = dut.predict(dut_in, do_sample=False, compute_values=False).action_record.cpu()
            lp_ref = ref.evaluate_actions(ref_in, greedy_ref, compute_values=False)["logprobs"].float()
        out = dut.evaluate_actions(dut_in, greedy_ref.to(self.device), compute_values=False)
        lp = out["logprobs"].float()
        (-lp.mean()).backward()
        grads = [p.grad for p in dut.parameters() if p.grad is not None]
        diff = (lp.detach().cpu() - lp_ref).abs()
        agree = (greedy_dut == greedy_ref).float().mean().item()
        if not grads or not all(torch.isfinite(g).all() for g in grads):
            raise AssertionError("non-finite or missing gradients in bf16")
        if agree < 0.9 or diff.mean().item() > 0.1:
            raise AssertionError(f"bf16 vs fp32: greedy tokens agree on {agree:.3f}, mean |d logprob| {diff.mean():.4f}")
        return f"bf16 vs fp32 CPU: greedy tokens agree {agree:.3f}, |d logprob| mean {diff.mean():.4f} max {diff.max():.4f}; {len(grads)} finite grads"

    def sampling(self) -> str:
        """One worker's DeviceGenerators serves logits on the device (the HF policy) and on the CPU
        (what a vLLM engine returns), and its saved state replays both streams."""
        from embodied_rl.models.generators import DeviceGenerators

        bf16, fp32 = self.model_cfg("bf16"), self.model_cfg("fp32")
        bf16.top_k = fp32.top_k = 3
        on_device = build_policy(bf16, device=self.device, dtype=torch.bfloat16, warn_untrained_value_head=False).eval()
        on_cpu = build_policy(fp32, device="cpu", dtype=torch.float32, warn_untrained_value_head=False).eval()
        obs = self.observations(8)
        inputs = {k: v.to(self.device) for k, v in on_device.prepare_inputs(obs).items()}
        cpu_inputs = on_cpu.prepare_inputs(obs)

        def draw(gens: DeviceGenerators) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.no_grad():
                kw = {"do_sample": True, "temperature": 1.0, "compute_values": False, "generator": gens}
                return on_device.predict(inputs, **kw).action_record.cpu(), on_cpu.predict(cpu_inputs, **kw).action_record

        gens = DeviceGenerators(seed=1)
        draw(gens)  # makes the generators; a device never sampled on has no state to save
        state = gens.get_state()
        first = draw(gens)
        restored = DeviceGenerators(seed=99)
        restored.set_state(state)
        again, other = draw(restored), draw(DeviceGenerators(seed=2))
        if not all(torch.equal(a, b) for a, b in zip(first, again)):
            raise AssertionError("a restored generator state drew other tokens")
        devices = sorted(gens.get_state())
        return (f"one generator set sampled on {', '.join(devices)}; a restored state repeats both streams; "
                f"another seed differs on {(first[0] != other[0]).float().mean().item():.3f} of tokens")

    def ppo_update(self) -> str:
        from embodied_rl.workers.actor import fsdp
        from embodied_rl.workers.actor.worker import ActorWorker

        cfg = self.root_cfg()
        batch = make_rollout_batch(cfg)
        self.worker = ActorWorker(cfg, 0, 1)
        info = self.worker.setup("127.0.0.1", fsdp.free_port())
        before = self.policy_weights()
        metrics = [self.worker.train_step(batch) for _ in range(2)]
        moved = (self.policy_weights() - before).abs().max().item()
        bad = {k: v for m in metrics for k, v in m.items() if not math.isfinite(v)}
        if bad or moved == 0.0:
            raise AssertionError(f"non-finite metrics {sorted(bad)} or weights unchanged (max move {moved})")
        return (f"backend {info['backend']} on {info['device']}: 2 steps, policy loss {metrics[-1]['train/actor/policy_loss']:.4f}, "
                f"grad norm {metrics[-1]['train/actor/grad_norm']:.3f}, max weight move {moved:.2e}")

    def sft_step(self) -> str:
        from embodied_rl.demos.sft_data import SFTSamples
        from embodied_rl.workers.actor.demos import DemoFeed
        from embodied_rl.workers.actor.updates.sft import SFTUpdate

        w = self.require_worker()
        n = 16
        inputs = w.policy.prepare_inputs(self.observations(n, seed=3))
        length = w.cfg.actor.model.num_action_chunks * w.cfg.actor.model.action_dim
        # One target bin per action dimension: a pattern a few steps of cloning must start to fit.
        tokens = torch.arange(length).remainder(w.cfg.actor.model.action_dim).mul(32).add(16).expand(n, length).clone()
        # The SFT update on the same engine (its optimizer and shards) as the PPO steps above.
        sft = SFTUpdate(w.cfg, w.engine)
        sft.demos = DemoFeed(w.engine, SFTSamples(inputs, tokens, torch.ones(n, length, dtype=torch.bool)))
        nll = [sft.step()["train/sft/nll"] for _ in range(3)]
        if not all(math.isfinite(x) for x in nll) or not nll[-1] < nll[0]:
            raise AssertionError(f"SFT NLL did not fall: {nll}")
        return "NLL " + " -> ".join(f"{x:.4f}" for x in nll)

    def export(self) -> str:
        w = self.require_worker()
        sd, version = w.get_trainable_state_dict()
        trained = build_policy(self.model_cfg("fp32"), device="cpu", dtype=torch.float32, warn_untrained_value_head=False)
        trained.load_trainable_state_dict(sd)
        out = self.work / "export"
        trained.export_merged(out)
        cfg = self.model_cfg("fp32")
        cfg.model_path = str(out)
        reloaded = build_policy(cfg, device=self.device, dtype=torch.float32, warn_untrained_value_head=False).eval()
        obs = self.observations(4, seed=5)
        with torch.no_grad():
            ref_in = trained.eval().prepare_inputs(obs)
            tokens = trained.predict(ref_in, do_sample=False, compute_values=False).action_record
            a = trained.evaluate_actions(ref_in, tokens, compute_values=False)["logprobs"]
            b = reloaded.evaluate_actions({k: v.to(self.device) for k, v in reloaded.prepare_inputs(obs).items()},
                                          tokens.to(self.device), compute_values=False)["logprobs"].cpu()
        diff = (a - b).abs().max().item()
        if diff > 1e-3:
            raise AssertionError(f"the reloaded export differs from the trained policy: max |d logprob| {diff:.2e}")
        return f"weight version {version}, {len(sd)} tensors exported and rebuilt on {self.device.type}: max |d logprob| {diff:.1e}"

    def weight_sync(self) -> str:
        """The actor's buckets (what share_trainable_state_dict puts in the object store) through
        a pipe to another process, which loads them as a rollout worker does."""
        from embodied_rl.distributed.weight_sync import make_buckets
        from embodied_rl.workers.actor import fsdp

        w = self.require_worker()
        bucket_bytes = 64 * 2**10  # the tiny policy in many buckets
        sd = w.policy.trainable_state_dict()
        sent = {k: v.full_tensor().detach().cpu() for k, v in sd.items()}
        frames = io.BytesIO()
        buckets = list(make_buckets(fsdp.iter_full(sd, 0), torch.bfloat16, bucket_bytes))
        for bucket in buckets:
            _frame(frames, bucket)
        proc = subprocess.run([sys.executable, "-c", RECEIVER, str(self.model_dir), str(self.device)], input=frames.getvalue(),
                              capture_output=True, timeout=300, check=False, cwd=Path(__file__).resolve().parents[1])
        if proc.returncode != 0:
            raise AssertionError(f"receiver failed: {proc.stderr.decode()[-2000:]}")
        got, grew = torch.load(io.BytesIO(proc.stdout), weights_only=True)
        bad = [k for k, v in sent.items() if not torch.equal(got[k], v.to(torch.bfloat16))]
        if bad or set(got) != set(sent):
            raise AssertionError(f"received weights differ from the actor's cast to bf16: {bad[:5]}")
        total = sum(v.numel() * 2 for v in sent.values())
        memory = "" if grew is None else f"; receiver's device memory grew {grew / 2**10:.0f} KiB at peak (dict {total / 2**10:.0f} KiB)"
        if grew is not None and grew > 2 * max(bucket_bytes, max(v.numel() * 2 for v in sent.values())):
            raise AssertionError(f"the receiver's device memory grew {grew} B, more than about one bucket ({bucket_bytes} B)")
        return f"{len(sent)} tensors in {len(buckets)} bf16 buckets to a second process on {self.device.type}: equal to the actor's cast{memory}"

    def meta_init(self) -> str:
        from embodied_rl.workers.actor import fsdp

        w = self.require_worker()
        a = w.cfg.actor

        def build(meta: bool):
            if meta:
                return fsdp.build_sharded_policy(a.model, a.fsdp_config, rank=0, world_size=1, device=self.device,
                                                 init_seed=a.seed, warn_untrained_value_head=False)
            torch.manual_seed(a.seed)
            eager = build_policy(a.model, device=self.device, dtype=torch.float32, init_seed=a.seed, warn_untrained_value_head=False)
            return fsdp.apply_fsdp2(eager, a.fsdp_config, 1, self.device)

        peaks, states = {}, {}
        for meta in (False, True):
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(self.device)
                start = torch.cuda.memory_allocated(self.device)
            policy = build(meta)
            if self.device.type == "cuda":
                peaks[meta] = torch.cuda.max_memory_allocated(self.device) - start
            states[meta] = fsdp.full_model_state_dict(policy)
            del policy
        bad = [k for k, v in states[False].items() if k not in states[True] or not torch.equal(v, states[True][k])]
        if bad or len(states[True]) != len(states[False]):
            raise AssertionError(f"the meta-built policy differs from the eager build: {bad[:5]}")
        memory = "" if not peaks else (f"; device peak eager {peaks[False] / 2**20:.1f} MiB, meta {peaks[True] / 2**20:.1f} MiB "
                                       f"({peaks[False] / max(peaks[True], 1):.2f}x)")
        return f"{len(states[True])} tensors equal to the eager build{memory}"

    # ---- helpers of the worker checks ------------------------------------------------
    def policy_weights(self) -> torch.Tensor:
        return torch.cat([p.detach().full_tensor().float().flatten().cpu() for p in self.worker.policy.parameters()])

    def require_worker(self):
        if self.worker is None:
            raise Skip("needs ppo_update's worker")
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()


CHECKS: tuple[str, ...] = ("packages", "forward", "sampling", "ppo_update", "sft_step", "export", "weight_sync", "meta_init")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="run every check on the CPU (CI's smoke of this script)")
    ap.add_argument("--keep", help="write the model and export here and keep them (default: a temporary directory)")
    args = ap.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_smoke: no CUDA device visible to torch; run with --cpu to smoke the checks on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.cpu else "cuda:0")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    work.mkdir(parents=True, exist_ok=True)
    smoke, results = Smoke(device, work), {}
    try:
        for name in CHECKS:
            fn: Callable[[], str] = getattr(smoke, name)
            t0 = time.perf_counter()
            try:
                detail, status = fn(), "PASS"
            except Skip as why:
                detail, status = str(why), "SKIP"
            except Exception as err:  # noqa: BLE001  (one failed check must not hide the others)
                detail, status = f"{type(err).__name__}: {err}", "FAIL"
                traceback.print_exc(file=sys.stderr)
            results[name] = status
            print(f"{status} {name:11s} {time.perf_counter() - t0:6.1f} s  {detail}{smoke.peak()}", flush=True)
    finally:
        smoke.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    counts = {s: sum(v == s for v in results.values()) for s in ("PASS", "FAIL", "SKIP")}
    print(f"gpu_smoke on {device}: " + ", ".join(f"{n} {s.lower()}" for s, n in counts.items()))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
