"""Where a PickCube-v1 policy fails: the held-out episodes of a checkpoint, sorted by how far they got.

    .venv/bin/python scripts/pick_cube_failures.py runs/NAME --step N [--sample]

Replays the run's evaluation (its env.eval config, sub-env count, rollout epochs and fixed reset
ids, so the episodes are those its eval/success_once counted), greedy unless --sample, with
ManiSkill's dense reward, whose level at each step tells the stage reached:
reaching 1 - tanh(5 d_tcp,cube) <= 1, plus 1 while the cube is grasped, plus the placing term
1 - tanh(5 d_cube,goal) while grasped, plus the static term once the cube is placed; 5 on success.
A step worth >= 1.5 therefore holds the cube (up to the rare start whose goal lies on the table).
Prints the episodes per stage: never grasped (with how close the gripper came), grasped but
never brought within 2.5 cm of the goal (and how many were dropped), placed but not still, success.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import torch

GRASPED = 1.5  # reward level of a step that holds the cube


def reach_distance(reward: float) -> float:
    """tcp-to-cube distance (m) of a step whose whole reward is the reaching term."""
    return math.atanh(min(max(1.0 - reward, 0.0), 0.999999)) / 5


def stages(rewards: torch.Tensor, success: torch.Tensor) -> dict[str, torch.Tensor]:
    """rewards [N, T] dense (not normalised), success bool [N, T] -> bool [N] per stage."""
    won = success.any(-1)
    held = rewards >= GRASPED
    # grasped and within 2.5 cm of the goal: reach ~1 + 1 + (1 - tanh(0.125)) = 2.88
    placed = (rewards >= 2.0 + 1.0 - math.tanh(5 * 0.025) - 0.05).any(-1)
    return {
        "never grasped": ~held.any(-1),
        "grasped, never placed": held.any(-1) & ~placed & ~won,
        "  of which dropped by the end": held.any(-1) & ~held[:, -1] & ~placed & ~won,
        "placed, not still (no success)": placed & ~won,
        "success": won,
    }


def main() -> None:
    from embodied_rl.envs import make_env
    from embodied_rl.process_env import configure_process_env
    from embodied_rl.replay import checkpoint_policy
    from embodied_rl.runtime.checkpoint import CKPT_DIR, step_dir_name

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a run directory with checkpoints (SFT or RL)")
    ap.add_argument("--step", type=int, required=True, help="checkpoint step")
    ap.add_argument("--sample", action="store_true", help="sample as the run's sampled evaluation does (default: greedy)")
    args = ap.parse_args()
    configure_process_env()

    ckpt = args.run / CKPT_DIR / step_dir_name(args.step)
    if not ckpt.is_dir():
        raise SystemExit(f"{ckpt}: no such checkpoint; pick a step listed in {args.run / CKPT_DIR}")
    cfg, policy = checkpoint_policy(ckpt)
    if cfg.env.eval.init_params.get("id") != "PickCube-v1":
        raise SystemExit(f"{ckpt}: env.eval is {cfg.env.eval.init_params.get('id')}, this reads PickCube-v1's reward levels")
    params = dict(cfg.env.eval.init_params, reward_mode="dense")
    video_cfg = dataclasses.replace(cfg.env.eval.video_cfg, save_video=False)
    env_cfg = dataclasses.replace(cfg.env.eval, init_params=params, video_cfg=video_cfg)
    num_envs, sp = env_cfg.total_num_envs, cfg.algorithm.sampling_params
    chunks = -(-env_cfg.max_episode_steps // cfg.actor.model.num_action_chunks)
    env = make_env(env_cfg, num_envs)
    gen = torch.Generator().manual_seed(cfg.runner.seed)
    rewards, success = [], []
    try:
        for epoch in range(cfg.algorithm.eval_rollout_epoch):
            obs, r, s = env.reset(fixed_epoch=epoch), [], []
            for _ in range(chunks):
                with torch.no_grad():
                    out = policy.predict(policy.prepare_inputs(obs), do_sample=args.sample, temperature=sp.temperature_eval,
                                         compute_values=False, generator=gen)
                res = env.chunk_step(out.actions.float().numpy())
                r.append(torch.from_numpy(res.rewards))
                s.append(torch.from_numpy(res.successes))
                obs = res.obs
            rewards.append(torch.cat(r, -1))
            success.append(torch.cat(s, -1))
    finally:
        env.close()
    rewards = torch.cat(rewards)
    by_stage = stages(rewards, torch.cat(success))
    print(f"{args.run.name} step {args.step} ({'sampled' if args.sample else 'greedy'}): {len(rewards)} episodes")
    for name, mask in by_stage.items():
        print(f"  {name:32s} {int(mask.sum()):3d}")
    missed = rewards.max(-1).values[by_stage["never grasped"]]
    if len(missed):
        q = torch.quantile(missed.double(), torch.tensor([0.75, 0.5, 0.25], dtype=torch.double))
        cm = ", ".join(f"{100 * reach_distance(float(x)):.1f}" for x in q)
        print(f"  never grasped: the gripper's closest approach to the cube, quartiles (cm): {cm}")


if __name__ == "__main__":
    main()
