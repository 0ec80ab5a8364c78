"""Where a PPO run's advantages come from: the actions, or the initial states.

Rolls a run's checkpoint (policy and critic) in its training env, in groups of sub-envs that
share an initial state, computes the run's advantages with its own critic and reward
statistics, and prints per chunk how advantages differ between successful and failed
episodes, how well the critic's value of the first observation predicts the return, and which
share of the variance of the first chunk's advantage, of the return and of success lies
between initial states rather than within them. A share near 1 means the advantage mostly
says "this start was easy", which a group baseline (GRPO) removes and a critic must learn.

    python scripts/advantage_sources.py runs/NAME --step 10 --groups 32 --group-size 4 --envs 8
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import torch


def between_state_share(x: torch.Tensor, group_size: int) -> float:
    """Share of the variance of x [G * group_size] (consecutive groups share an initial state)
    that lies between the groups' means."""
    g = x.detach().double().reshape(-1, group_size)
    return float(g.mean(1).var(unbiased=False) / g.var(unbiased=False))


def corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(np.corrcoef(a.detach().double().numpy(), b.detach().double().numpy())[0, 1])


def main() -> None:
    from embodied_rl.algorithms import RunningRewardStats, compute_advantages
    from embodied_rl.algorithms.estimators import group_normalized_scores
    from embodied_rl.envs import make_env
    from embodied_rl.process_env import configure_process_env
    from embodied_rl.replay import checkpoint_policy
    from embodied_rl.rollout_batch import RolloutBatch
    from embodied_rl.runtime.checkpoint import (
        CKPT_DIR,
        load_runner_state,
        step_dir_name,
    )

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a training run directory with checkpoints")
    ap.add_argument("--step", type=int, required=True, help="checkpoint step")
    ap.add_argument("--groups", type=int, default=32, help="initial states")
    ap.add_argument("--group-size", type=int, default=4, help="episodes per initial state")
    ap.add_argument("--envs", type=int, default=8, help="sub-envs (simulator processes) at once")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    configure_process_env()

    ckpt = args.run / CKPT_DIR / step_dir_name(args.step)
    if args.envs % args.group_size or (args.groups * args.group_size) % args.envs:
        raise SystemExit("--envs must be a multiple of --group-size and divide --groups x --group-size")
    cfg, policy = checkpoint_policy(ckpt)
    if not cfg.algorithm.uses_critic:
        raise SystemExit(f"{ckpt}: adv_type={cfg.algorithm.adv_type} has no critic to examine")
    env_cfg = dataclasses.replace(cfg.env.train, group_size=args.group_size, auto_reset=False)
    env = make_env(env_cfg, args.envs, seed_offset=1000 + args.seed)
    sp, chunks = cfg.algorithm.sampling_params, -(-env_cfg.max_episode_steps // cfg.actor.model.num_action_chunks)
    gen = torch.Generator().manual_seed(args.seed)
    parts: dict[str, list[torch.Tensor]] = {"rewards": [], "dones": [], "values": [], "success": []}
    try:
        for _ in range(args.groups * args.group_size // args.envs):
            obs, steps = env.reset(), {k: [] for k in parts}
            for _ in range(chunks):
                with torch.no_grad():
                    out = policy.predict(policy.prepare_inputs(obs), do_sample=True, temperature=sp.temperature_train,
                                         generator=gen)
                res = env.chunk_step(out.actions.float().numpy())
                steps["values"].append(out.values.float())
                steps["rewards"].append(torch.from_numpy(res.rewards))
                steps["dones"].append(torch.from_numpy(res.terminations | res.truncations))
                steps["success"].append(torch.from_numpy(res.successes))
                obs = res.obs
            steps["values"].append(torch.zeros_like(steps["values"][-1]))  # every episode ends in the last chunk
            for k, kept in parts.items():
                kept.append(torch.stack(steps[k]))
    finally:
        env.close()
    rewards, dones, values, success = (torch.cat(parts[k], dim=1) for k in ("rewards", "dones", "values", "success"))
    reward_stats = RunningRewardStats()
    saved = load_runner_state(ckpt, restore_rng=False).extra.get("reward_stats")
    if saved:
        reward_stats.load_state_dict(saved)
    t, n, c = rewards.shape
    batch = RolloutBatch(rewards=rewards, dones=dones, truncations=torch.zeros_like(dones),
                         logprobs=torch.zeros(t, n, c * cfg.actor.model.action_dim), values=values[:-1], last_values=values[-1])
    adv = compute_advantages(cfg.algorithm, batch, action_dim=cfg.actor.model.action_dim, auto_reset=False,
                             reward_stats=reward_stats).advantages.mean(-1)  # [T, N]: a chunk's tokens share it
    won, ret = success.any(-1).any(0), rewards.sum((0, 2))
    print(f"{args.run.name} step {args.step}: {n} episodes from {args.groups} initial states, success {won.float().mean():.3f}, "
          f"return {ret[won].mean():.2f} (successes) / {ret[~won].mean():.2f} (failures)")
    for k in range(t):
        print(f"  chunk {k}: advantage {adv[k][won].mean():+.2f} (successes) / {adv[k][~won].mean():+.2f} (failures), "
              f"corr with success {corr(adv[k], won.float()):+.2f}")
    print(f"  corr(V(first observation), return) {corr(values[0, :, 0], ret):+.2f}")
    grpo, _ = group_normalized_scores(ret, args.group_size, True)
    for name, x in (("first chunk's advantage", adv[0]), ("return", ret), ("success", won.float())):
        print(f"  between-state share of the variance of the {name}: {between_state_share(x, args.group_size):.2f}")
    print(f"  corr(first chunk's advantage, GRPO's advantage of the same episodes) {corr(adv[0], grpo):+.2f}")


if __name__ == "__main__":
    main()
