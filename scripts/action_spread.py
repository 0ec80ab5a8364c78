"""How far sampled actions move from the greedy action, per sampling setting.

Rolls the config's policy greedily in its training env and, at every chunk, draws tokens from
the same logits under each sampling setting (top-k, temperature). Per setting it prints how
far a sampled token lies from the greedy one, in bins (one bin is 2/256 of the normalised
action range: 0.78 mm of end-effector motion per step under ManiSkill's pd_ee_delta_pose), and
the share of the probability mass left more than 3 bins away: how far the policy can explore
with that setting (docs/LEARNING.md).

    python scripts/action_spread.py maniskill_ppo_from_sft --settings 3:0.5 10:1.0 0:1.0 --episodes 16
"""
from __future__ import annotations

import argparse

import torch


def spread(logits: torch.Tensor, greedy: torch.Tensor, top_k: int, temperature: float, window: int, draws: int,
           gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(|sampled - greedy| in bins [B * T, draws], mass beyond 3 bins [B * T]) for logits [B, T, K]."""
    from embodied_rl.models.openvla_oft.sampling import process_logits

    probs = torch.softmax(process_logits(logits, temperature, top_k, window), dim=-1).reshape(-1, logits.shape[-1])
    drawn = torch.multinomial(probs, draws, replacement=True, generator=gen)  # [B*T, draws]
    dist = (drawn - greedy.reshape(-1, 1)).abs()
    bins = torch.arange(logits.shape[-1])
    far = ((bins.view(1, -1) - greedy.reshape(-1, 1)).abs() > 3).float()
    return dist.float(), (probs * far).sum(-1)


def main() -> None:
    from greedy_states import greedy_chunks  # beside this script

    from embodied_rl.configure import load_config
    from embodied_rl.models.registry import build_policy
    from embodied_rl.process_env import configure_process_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="experiment config (its actor.model and env.train are used)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides")
    ap.add_argument("--settings", nargs="+", default=["3:0.5", "10:1.0", "0:1.0", "0:1.0:4"],
                    help="top_k:temperature[:window], as actor.model.top_k (0: all bins), algorithm.sampling_params.temperature_train and actor.model.action_bin_window (0 = none)")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--draws", type=int, default=16, help="draws per token and setting")
    args = ap.parse_args()
    configure_process_env()
    cfg = load_config(args.config, args.overrides)
    policy = build_policy(cfg.actor.model, device="cpu", warn_untrained_value_head=False).eval()
    settings = [(int(p[0]), float(p[1]), int(p[2]) if len(p) > 2 else 0) for p in (s.split(":") for s in args.settings)]
    gen = torch.Generator().manual_seed(0)
    dists: dict[tuple[int, float, int], list[torch.Tensor]] = {s: [] for s in settings}
    far: dict[tuple[int, float, int], list[torch.Tensor]] = {s: [] for s in settings}
    for _, logits in greedy_chunks(policy, cfg.env.train, cfg.actor.model.num_action_chunks, args.episodes, args.envs):
        greedy = logits.argmax(-1)
        for s in settings:
            d, f = spread(logits, greedy, *s, args.draws, gen)
            dists[s].append(d)
            far[s].append(f)
    print(f"{args.config}: {args.episodes} greedy episodes, {args.draws} draws per token; distance from the greedy bin")
    dim = cfg.actor.model.action_dim
    print("top_k  temp  window  mean bins  p90  p99  max   P(>1 bin)  P(>3 bins)  mass beyond 3 bins   P(>3 bins) per action dimension")
    for s in settings:
        d, f = torch.cat(dists[s]), torch.cat(far[s])  # [tokens, draws], [tokens]; token i is dimension i % dim
        per_dim = " ".join(f"{(d[i::dim] > 3).float().mean():.3f}" for i in range(dim))
        d = d.flatten()
        print(f"{s[0]:5d}  {s[1]:4.2f}  {s[2]:6d}  {d.mean():9.2f}  {d.quantile(0.9):3.0f}  {d.quantile(0.99):3.0f}  {d.max():3.0f}"
              f"   {(d > 1).float().mean():9.3f}  {(d > 3).float().mean():10.3f}  {f.mean():18.3f}   {per_dim}")


if __name__ == "__main__":
    main()
