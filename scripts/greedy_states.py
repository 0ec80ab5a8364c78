"""The states a policy visits when it acts greedily, for the diagnostic scripts beside this one
(action_spread.py, greedy_flips.py): each chunk's observation and the policy's action logits there."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def greedy_chunks(policy: Any, env_cfg: Any, num_action_chunks: int, episodes: int, envs: int) -> Iterator[tuple[Any, torch.Tensor]]:
    """Roll `policy` greedily in `env_cfg` (episodes rounded up to a multiple of envs); yield
    (observation, action logits float [B, L, bins]) at every chunk."""
    from embodied_rl.envs import make_env

    env = make_env(env_cfg, envs, seed_offset=7)
    chunks = -(-env_cfg.max_episode_steps // num_action_chunks)
    try:
        for _ in range(-(-episodes // envs)):
            obs = env.reset()
            for _ in range(chunks):
                inputs = policy.prepare_inputs(obs)
                with torch.no_grad():
                    logits, _ = policy._logits_and_values(inputs, False)
                yield obs, logits.float()
                out = policy.predict(inputs, do_sample=False, compute_values=False)
                obs = env.chunk_step(out.actions.float().numpy()).obs
    finally:
        env.close()
