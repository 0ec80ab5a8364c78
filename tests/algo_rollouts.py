"""Random rollouts in the runtime's layout for the algorithm tests (not a test module).

Episodes end at random env steps, also inside a chunk. auto_reset=True: the env resets at
the chunk boundary, so the rest of that chunk is a no-op (reward 0, no flags).
auto_reset=False: the env idles after its first episode end.
"""
from __future__ import annotations

import numpy as np
import torch

from embodied_rl.rollout_batch import RolloutBatch


def make_rollout(seed: int, T: int, N: int, C: int, A: int, *, auto_reset: bool = True, p_done: float = 0.15,
                 p_trunc: float = 0.5, value_k: int | None = None) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, N, C)).astype(np.float32)
    dones = np.zeros((T, N, C), bool)
    truncs = np.zeros((T, N, C), bool)
    for n in range(N):
        idle = False
        for t in range(T):
            ended_in_chunk = False
            for c in range(C):
                if idle or ended_in_chunk:
                    rewards[t, n, c] = 0.0
                    continue
                if rng.random() < p_done:
                    dones[t, n, c] = True
                    truncs[t, n, c] = rng.random() < p_trunc
                    ended_in_chunk = True
                    idle = not auto_reset
    k = C if value_k is None else value_k
    boot = torch.from_numpy(rng.normal(size=(T, N, C)).astype(np.float32)) * torch.from_numpy(truncs)
    values = torch.from_numpy(rng.normal(size=(T + 1, N, k)).astype(np.float32))  # the last row: last_values
    return RolloutBatch(
        rewards=torch.from_numpy(rewards),
        dones=torch.from_numpy(dones),
        truncations=torch.from_numpy(truncs),
        bootstrap_values=boot,
        values=values[:-1], last_values=values[-1],
        logprobs=torch.from_numpy(-rng.random(size=(T, N, C * A)).astype(np.float32)),
        ref_logprobs=torch.from_numpy(-rng.random(size=(T, N, C * A)).astype(np.float32)),
    )
