"""A rollout batch as the runtime hands the actor (embodied_rl/rollout_batch.py), made by
the real policy from random observations: time-major [T, N, ...], every tensor from the policy's
`prepare_inputs` + `predict` and the real `compute_advantages`. Imports neither Ray nor the config
loader, so scripts/gpu_smoke.py uses it on a bare GPU machine too."""
from __future__ import annotations

import numpy as np
import torch

from embodied_rl.algorithms import compute_advantages
from embodied_rl.models import build_policy
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.types import EnvObservation

T, N = 4, 4  # chunk steps x envs -> 16 samples


def make_rollout_batch(cfg, seed: int = 0) -> RolloutBatch:
    """A time-major batch [T, N, ...] as the runtime produces it, from real policy calls."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    # The actor seeds with actor.seed before building (LoRA init) and builds the value head from
    # init_seed=actor.seed, so this policy equals the actor's initial one, as after the runtime's
    # initial weight sync.
    torch.manual_seed(cfg.actor.seed)
    policy = build_policy(cfg.actor.model, device="cpu", dtype=torch.float32, init_seed=cfg.actor.seed).eval()
    size = policy.arch.image_size
    obs = EnvObservation(
        main_images=rng.integers(0, 256, size=(T * N, size, size, 3), dtype=np.uint8),
        states=rng.standard_normal((T * N, 8)).astype(np.float32),
        task_descriptions=["pick up the cube"] * (T * N),
    )
    if cfg.actor.model.value_input == "privileged_state":
        obs.privileged_states = rng.standard_normal((T * N, cfg.actor.model.privileged_state_dim)).astype(np.float32)
    with torch.no_grad():
        inputs = policy.prepare_inputs(obs)
        out = policy.predict(inputs, do_sample=True, temperature=1.0, compute_values=True, generator=gen)
    tm = lambda x: x.reshape(T, N, *x.shape[1:])
    c = cfg.actor.model.num_action_chunks
    dones = torch.zeros(T, N, c, dtype=torch.bool)
    dones[1, 0, -1] = True
    values = tm(out.values) if cfg.algorithm.uses_critic else None
    rollout = RolloutBatch(
        rewards=torch.rand(T, N, c, generator=gen), dones=dones, truncations=torch.zeros_like(dones),
        logprobs=tm(out.logprobs), forward_inputs={k: tm(v) for k, v in out.forward_inputs.items()},
        action_record=tm(out.action_record), values=values, last_values=None if values is None else values[-1],
    )
    return compute_advantages(cfg.algorithm, rollout, action_dim=cfg.actor.model.action_dim, auto_reset=True)
