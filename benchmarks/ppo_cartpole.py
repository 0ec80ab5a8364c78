"""Does PPO built from embodied_rl.algorithms learn? CartPole-v1 on CPU.

Uses only `compute_advantages` and `compute_actor_critic_loss` for the RL math: the
rollout is laid out like the VLA runtime's (T steps, N envs, C=1 action of A=1 token),
with gymnasium's same-step auto-reset and truncated episodes bootstrapped from
V(final_obs). Every `--eval-every` updates it runs 20 deterministic (argmax) episodes and
stops once their mean return reaches 475. Prints achieved/475 as the ratio.

    python benchmarks/ppo_cartpole.py [--max-steps 500000] [--seed 1]
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import embodied_rl  # noqa: F401
from embodied_rl.algorithms import compute_actor_critic_loss, compute_advantages
from embodied_rl.config.schema.algorithm import AlgorithmConfig
from embodied_rl.rollout_batch import RolloutBatch

THRESHOLD = 475.0


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()

        def mlp(out: int, std: float) -> nn.Sequential:
            layers = [nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)]
            for layer in layers[::2]:
                nn.init.orthogonal_(layer.weight, np.sqrt(2))
                nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(layers[-1].weight, std)
            return nn.Sequential(*layers)

        self.actor, self.critic = mlp(n_actions, 0.01), mlp(1, 1.0)

    def dist(self, obs: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.actor(obs))


def evaluate(model: ActorCritic, episodes: int, seed: int) -> float:
    env = gym.make("CartPole-v1")
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                action = int(model.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax())
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=500_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--horizon", type=int, default=128)
    p.add_argument("--eval-every", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    cfg = AlgorithmConfig(adv_type="gae", reward_type="action_level", gamma=0.99, gae_lambda=0.95,
                          ratio_clip_eps=0.2, value_clip=0.2, value_loss_coef=0.5, entropy_bonus=0.01,
                          normalize_advantages=True, update_epoch=4)
    N, T = args.num_envs, args.horizon
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(N)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    model = ActorCritic(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4, eps=1e-5)
    obs, _ = envs.reset(seed=args.seed)
    obs = torch.as_tensor(obs, dtype=torch.float32)
    steps, updates, start, best = 0, 0, time.perf_counter(), 0.0
    num_updates = args.max_steps // (N * T)
    while steps < args.max_steps:
        opt.param_groups[0]["lr"] = 2.5e-4 * (1.0 - updates / num_updates)
        buf = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done", "trunc", "boot")}
        with torch.no_grad():
            for _ in range(T):
                d = model.dist(obs)
                act = d.sample()
                buf["obs"].append(obs)
                buf["act"].append(act)
                buf["logp"].append(d.log_prob(act))
                buf["val"].append(model.critic(obs)[:, 0])
                nxt, r, term, trunc, info = envs.step(act.numpy())
                boot = torch.zeros(N)
                if trunc.any():  # SAME_STEP auto-reset: the final observation is in info
                    final = torch.as_tensor(np.stack([info["final_obs"][i] if trunc[i] else np.zeros(4) for i in range(N)]), dtype=torch.float32)
                    boot = model.critic(final)[:, 0] * torch.as_tensor(trunc & ~term, dtype=torch.float32)
                buf["rew"].append(torch.as_tensor(r, dtype=torch.float32))
                buf["done"].append(torch.as_tensor(term | trunc))
                buf["trunc"].append(torch.as_tensor(trunc & ~term))
                buf["boot"].append(boot)
                obs = torch.as_tensor(nxt, dtype=torch.float32)
            last_val = model.critic(obs)[:, 0]
        steps += N * T
        stack = lambda k, buf=buf: torch.stack(buf[k])[..., None]
        batch = RolloutBatch(rewards=stack("rew"), dones=stack("done"), truncations=stack("trunc"), logprobs=stack("logp"),
                             bootstrap_values=stack("boot"), values=stack("val"), last_values=last_val[:, None])
        batch = compute_advantages(cfg, batch, action_dim=1, auto_reset=True)
        flat = lambda x: x.reshape(T * N, -1)
        b_obs, b_act = torch.stack(buf["obs"]).reshape(T * N, -1), torch.stack(buf["act"]).reshape(T * N)
        b_logp, b_val = flat(batch.logprobs), flat(batch.values)
        b_adv, b_ret, b_mask = flat(batch.advantages), flat(batch.returns), flat(batch.loss_mask)
        for _ in range(cfg.update_epoch):
            for mb in torch.randperm(T * N).split(T * N // 4):
                d = model.dist(b_obs[mb])
                loss, metrics = compute_actor_critic_loss(
                    cfg, logprobs=d.log_prob(b_act[mb])[:, None], old_logprobs=b_logp[mb], advantages=b_adv[mb],
                    loss_mask=b_mask[mb], entropy=d.entropy()[:, None], values=model.critic(b_obs[mb]),
                    old_values=b_val[mb], returns=b_ret[mb])
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
        updates += 1
        if updates % args.eval_every == 0:
            score = evaluate(model, 20, seed=10_000 + updates)
            best = max(best, score)
            print(f"steps={steps:>7d} eval_mean_return={score:6.1f} value_loss={metrics['critic/value_loss']:.3f} "
                  f"clip_frac={metrics['actor/clip_fraction']:.3f} t={time.perf_counter() - start:.0f}s", flush=True)
            if score >= THRESHOLD:
                break
    wall = time.perf_counter() - start
    print(f"RESULT solved={best >= THRESHOLD} env_steps={steps} wall_s={wall:.1f} "
          f"best_eval_mean_return={best:.1f} ratio_vs_475={best / THRESHOLD:.3f}")


if __name__ == "__main__":
    main()
