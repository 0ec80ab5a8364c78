"""Our recipe against the pixel-PPO anchor (benchmarks/ppo_rgb_baseline.py) on one plot: held-out
greedy success against env steps and against wall time, from the same demos and the same 64
held-out initial states.

    python benchmarks/side_by_side.py --ours runs/maniskill_ppo_from_sft --baseline runs/ppo_rgb_s0/results.json \
        --out docs/img/side_by_side_push_cube.png

--ours takes training run directories (their metrics.jsonl and config.yaml); env steps of a step
are training sub-envs x chunk steps x chunk length x rollout epochs. Wall time counts from the
first evaluation (before the first update) and includes the later evaluations, on both sides.
Prints one row per evaluation and the ratio of the two methods' success at the last env-step
budget both reached.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml


def ours(run: Path) -> list[tuple[int, float, float, int]]:
    """(env steps, wall s since the first evaluation, greedy success, episodes) per evaluation of a run."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    env, chunk = cfg["env"]["train"], cfg["actor"]["model"]["num_action_chunks"]
    per_step = env["total_num_envs"] * math.ceil(env["max_episode_steps"] / chunk) * chunk * cfg["algorithm"]["rollout_epoch"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = {int(r["step"]): r for r in rows if "eval/success_once" in r}  # a restarted run rewrites its steps: the last wins
    t0 = evals[min(evals)]["time"]
    return [(s * per_step, r["time"] - t0, r["eval/success_once"], int(r["eval/num_trajectories"])) for s, r in sorted(evals.items())]


def baseline(results: Path) -> list[tuple[int, float, float, int]]:
    evals = json.loads(results.read_text())["evals"]
    t0 = evals[0]["wall_s"]
    return [(e["env_steps"], e["wall_s"] - t0, e["success_once"], e["episodes"]) for e in evals]


def at_budget(curve: list[tuple[int, float, float, int]], steps: int) -> float:
    """Success of the last evaluation at or before `steps` env steps."""
    return [c for c in curve if c[0] <= steps][-1][2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ours", type=Path, nargs="+", required=True, help="training run directories of our recipe")
    p.add_argument("--baseline", type=Path, nargs="+", required=True, help="results.json files of benchmarks/ppo_rgb_baseline.py")
    p.add_argument("--out", type=Path, required=True, help="the plot (PNG)")
    a = p.parse_args()
    curves = {f"OFT recipe ({r.name})": ours(r) for r in a.ours}
    curves |= {f"pixel PPO ({b.parent.name})": baseline(b) for b in a.baseline}
    for name, curve in curves.items():
        print(name)
        for steps, wall, success, episodes in curve:
            print(f"  {steps:>8} env steps  {wall / 60:6.1f} min  {100 * success:5.1f} % of {episodes}")
    budget = min(curve[-1][0] for curve in curves.values())
    ref = next(iter(curves.values()))
    for name, curve in list(curves.items())[1:]:
        print(f"at {budget} env steps: {name} {100 * at_budget(curve, budget):.1f} % vs {100 * at_budget(ref, budget):.1f} % "
              f"(ratio {at_budget(curve, budget) / max(at_budget(ref, budget), 1e-9):.2f})")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in curves.items():
        style = "o-" if name.startswith("OFT") else "s--"
        axes[0].plot([c[0] for c in curve], [100 * c[2] for c in curve], style, label=name)
        axes[1].plot([c[1] / 60 for c in curve], [100 * c[2] for c in curve], style, label=name)
    axes[0].set(title="held-out greedy success vs env steps", xlabel="env steps", ylabel="success % (64 episodes)")
    axes[1].set(title="held-out greedy success vs wall time (2 cores)", xlabel="minutes since the first evaluation", ylabel="success %")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"plot: {a.out}")


if __name__ == "__main__":
    main()
