"""Helpers for the actor tests: a real tiny OFT checkpoint, configs, and a real rollout batch.

The batch is what the runtime hands the actor (see embodied_rl/workers/actor/batch.py):
observations are random 56 px images, but every tensor comes from the real policy's
`prepare_inputs` + `predict` and the real `compute_advantages`. The session's `Host` actors
come from the `actor_hosts` fixture (tests/ray_fixtures.py).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import ray
import torch

from embodied_rl.config import RootConfig
from embodied_rl.config.loader import deep_merge
from embodied_rl.config.overrides import apply_override, parse_override
from embodied_rl.configure import config_from_dict
from embodied_rl.distributed.worker_group import gather_ranks
from embodied_rl.models.create import create_model
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.workers.actor import fsdp
from embodied_rl.workers.actor.worker import ActorWorker
from tests.rollout_batch import make_rollout_batch  # noqa: F401  (the actor tests import it from here)

_made: list[tuple[Path, torch.Tensor]] = []  # the checkpoint this process made, and torch's RNG after making it


def make_tiny_model(dirpath: Path) -> Path:
    """The tiny OFT checkpoint at 56 px, made once per test process, under the first caller's
    `dirpath` (the actor tests only read it); later callers get that one while it is there, with
    torch's global RNG put back where create_model left it, as `tiny_model` (tests/conftest.py) does."""
    if _made and (_made[0][0] / "config.json").is_file():
        out, rng_state = _made[0]
        torch.set_rng_state(rng_state)
        return out
    out = dirpath / "tiny-oft-56"
    if not out.exists():
        create_model("tiny", str(out), image_size=56, seed=0)
    _made[:] = [(out, torch.get_rng_state())]
    return out


def actor_config(model_path: Path, *overrides: str):
    """Schema defaults (PPO + GAE) with the test model, a value head and small batches.

    Built from the schema rather than an experiment file so the actor tests depend on the
    config system only, not on which env configs exist.
    """
    tree = deep_merge(dataclasses.asdict(RootConfig()), {
        "env": {"train": {"env_type": "maniskill"}, "eval": {"env_type": "maniskill"}},
        "actor": {"micro_batch_size": 4, "global_batch_size": 8,
                  "model": {"model_path": str(model_path), "add_value_head": True, "value_type": "chunk_level"},
                  "optim": {"clip_grad": 1.0}},
        "runner": {"max_steps": 5, "seed": 7},
    })
    for ov in overrides:
        apply_override(tree, parse_override(ov))
    return config_from_dict(tree, plan=False)  # the actor tests size their own groups


class Host:
    """Test-only Ray actor process that runs ActorWorkers one after another, so the heavy
    imports (torch, transformers, timm) are paid once per process, not once per test."""

    def __init__(self) -> None:
        self.worker: ActorWorker | None = None

    def address(self) -> tuple[str, int]:
        return fsdp.host_ip(), fsdp.free_port()

    def start(self, cfg, rank: int, world: int, addr: str, port: int) -> dict:
        self.worker = ActorWorker(cfg, rank, world)
        return self.worker.setup(addr, port)

    def call(self, method: str, *args):
        return getattr(self.worker, method)(*args)

    def run(self, fn):
        return fn(self.worker)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
            self.worker = None


def fsdp_facts(w: ActorWorker) -> dict:
    """What FSDP2 made of the policy on this rank (run inside a Host)."""
    unit = w.policy.fsdp_units()[0]
    group = unit._get_fsdp_state()._fsdp_param_group
    p = next(w.policy.parameters())
    return {"param_dtype": group.mp_policy.param_dtype, "reduce_dtype": group.mp_policy.reduce_dtype,
            "reshard_after_forward": group.post_forward_mesh_info is not None,
            "placements": [type(x).__name__ for x in p.placements],
            "buffer_dtypes": {b.dtype for b in w.policy.buffers() if b.is_floating_point()},
            "stored": {kind: {q.dtype for q in w.policy.parameters() if q.requires_grad == (kind == "trainable")}
                       for kind in ("trainable", "frozen")},
            "local_fraction": round(sum(q.to_local().numel() for q in w.policy.parameters()) / sum(q.numel() for q in w.policy.parameters()), 1)}


def demos_from_batch(batch: RolloutBatch):
    """A Host function giving a worker the batch's samples as its demos (what load_demos makes
    from recorded demos: inputs, expert action records, mask), so the BC term trains without a simulator."""
    from embodied_rl.demos.sft_data import SFTSamples
    from embodied_rl.workers.actor.demos import DemoFeed

    def give(w: ActorWorker) -> int:
        n = batch.num_steps * batch.num_envs
        inputs = {k: v.reshape(n, *v.shape[2:]) for k, v in batch.forward_inputs.items()}
        samples = SFTSamples(inputs, batch.action_record.reshape(n, -1), batch.loss_mask.reshape(n, -1))
        w.update.demos = DemoFeed(w.engine, samples)
        return n
    return give


def sft_step(w: ActorWorker) -> dict[str, float]:
    """One SFT step on the demos of a worker set up for RL (its BC term's), through the same engine."""
    from embodied_rl.workers.actor.updates.sft import SFTUpdate

    update = SFTUpdate(w.cfg, w.engine)
    update.demos = w.update.demos
    return update.step()


def counting_collectives(method, *args):
    """A Host function: (result of worker.method(*args), or of method(worker, *args) for a
    function, and the number of reduce-scatter ops the worker's process issued during it),
    counted with torch.profiler."""
    def run(w: ActorWorker):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = method(w, *args) if callable(method) else getattr(w, method)(*args)
        return out, sum("reduce_scatter" in e.name for e in prof.events())
    return run


#: torch.Tensor methods that copy a value to the host (a device sync on a GPU).
HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")


def counting_host_reads(method: str, *args):
    """A Host function: (result of worker.method(*args), number of HOST_READS calls on tensors
    during it), counted by wrapping those torch.Tensor methods for the call."""
    def run(w: ActorWorker):
        originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
        count = [0]

        def counted(fn):
            def wrapper(self, *a, **k):
                count[0] += 1
                return fn(self, *a, **k)
            return wrapper
        for name, fn in originals.items():
            setattr(torch.Tensor, name, counted(fn))
        try:
            out = method(w, *args) if callable(method) else getattr(w, method)(*args)
        finally:
            for name, fn in originals.items():
                setattr(torch.Tensor, name, fn)
        return out, count[0]
    return run


# Ray workers find the tests package only when the driver runs from the checkout root (Ray adds
# the driver's working directory to their path): ship this module by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class ActorGroup:
    """`world` ranks of ActorWorker on the first `world` hosts."""

    def __init__(self, hosts: list, cfg, world: int) -> None:
        self.hosts = hosts[:world]
        addr, port = ray.get(self.hosts[0].address.remote())
        self.info = ray.get([h.start.remote(cfg, r, world, addr, port) for r, h in enumerate(self.hosts)])

    def call(self, method: str, *args) -> list:
        return _get_all_ranks([h.call.remote(method, *args) for h in self.hosts])

    def run(self, fn) -> list:
        return _get_all_ranks([h.run.remote(fn) for h in self.hosts])

    def stop(self) -> None:
        ray.get([h.stop.remote() for h in self.hosts])

    def __enter__(self) -> ActorGroup:  # noqa: PYI034
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.stop()
            return
        # Other ranks may be blocked in a collective the failed rank never joined: restart them
        # and wait until they answer, so the next test does not meet an actor still restarting.
        for h in self.hosts:
            ray.kill(h, no_restart=False)
        deadline = time.monotonic() + 120
        for h in self.hosts:
            while True:
                try:
                    ray.get(h.address.remote(), timeout=30)
                    break
                except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)


def _get_all_ranks(refs: list) -> list:
    """Every rank's result; a failure reports what each rank did (the production gather)."""
    return gather_ranks(refs, "actor group")
