"""How sharp a policy's greedy action is, per action dimension, and how many greedy tokens another
policy would change on the same states.

Rolls policy A greedily in the config's training env. At every chunk it reports, per action
dimension, the probability A gives its own most likely bin, and, with a second policy B, the share
of tokens whose most likely bin differs under B and how far it moved (in bins). A dimension whose
most likely bin holds little probability has a greedy action that small updates can move far:
this is how the held-out outcome of a state flips between evaluations (docs/LEARNING.md).

    python scripts/greedy_flips.py maniskill_ppo_from_sft --b runs/X/export --episodes 16
"""
from __future__ import annotations

import argparse
import dataclasses

import torch


def _dims(x: torch.Tensor, dim: int, keep: torch.Tensor | None = None) -> str:
    """Mean of x per action dimension (token i is dimension i % dim), over `keep` when given."""
    cols = []
    for i in range(dim):
        v = x[i::dim] if keep is None else x[i::dim][keep[i::dim]]
        cols.append(f"{v.float().mean():6.3f}" if v.numel() else "     -")
    return " ".join(cols)


def main() -> None:
    from greedy_states import greedy_chunks  # beside this script

    from embodied_rl.configure import load_config
    from embodied_rl.models.registry import build_policy
    from embodied_rl.process_env import configure_process_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="experiment config (its actor.model is policy A, its env.train the env)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides")
    ap.add_argument("--b", help="model directory of policy B (e.g. `embodied-rl export` of a run's checkpoint)")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--envs", type=int, default=4)
    args = ap.parse_args()
    configure_process_env()
    cfg = load_config(args.config, args.overrides)
    policies = [build_policy(cfg.actor.model, device="cpu", warn_untrained_value_head=False).eval()]
    if args.b:
        model_b = dataclasses.replace(cfg.actor.model, model_path=args.b)
        policies.append(build_policy(model_b, device="cpu", warn_untrained_value_head=False).eval())
    top_a, b_of_a, flips, moved = [], [], [], []
    for obs, logits_a in greedy_chunks(policies[0], cfg.env.train, cfg.actor.model.num_action_chunks, args.episodes, args.envs):
        greedy_a = logits_a.argmax(-1)
        top_a.append(torch.softmax(logits_a, -1).amax(-1).flatten())
        if len(policies) > 1:
            with torch.no_grad():
                logits_b = policies[1]._logits_and_values(policies[1].prepare_inputs(obs), False)[0].float()
            greedy_b = logits_b.argmax(-1)
            b_of_a.append(torch.softmax(logits_b, -1).gather(-1, greedy_a.unsqueeze(-1)).flatten())
            flips.append((greedy_a != greedy_b).flatten())
            moved.append((greedy_a - greedy_b).abs().flatten())
    dim = cfg.actor.model.action_dim
    top = torch.cat(top_a)
    print(f"{args.config}: {args.episodes} greedy episodes of A, {top.numel()} tokens; columns are action dimensions")
    print(f"P_A(A's greedy bin)            {_dims(top, dim)}")
    if flips:
        f, d = torch.cat(flips), torch.cat(moved)
        print(f"P_B(A's greedy bin)            {_dims(torch.cat(b_of_a), dim)}")
        print(f"greedy bin differs under B     {_dims(f, dim)}")
        print(f"bins moved, where it differs   {_dims(d, dim, f)}")
        print(f"all dimensions: {f.float().mean():.3f} of greedy tokens differ")


if __name__ == "__main__":
    main()
