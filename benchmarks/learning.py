"""The learning result, reproduced from nothing: demos -> SFT -> RL from the SFT policy, with the
shipped recipe configs.

Tasks: ManiSkill3 PushCube-v1 (--task push_cube, its target visible) and PickCube-v1 (--task
pick_cube, its hidden goal in the policy's state input) on the CPU sim, 64 px, tiny OpenVLA-OFT
preset. Every phase runs through the real CLI, as a user would run it:

    embodied-rl demos SFT_CONFIG --num-demos D --out DEMO_DIR
    embodied-rl sft SFT_CONFIG runner.seed=S ...                     (per seed)
    embodied-rl export runs/sft_sS models/sft_sS
    embodied-rl train RL_CONFIG actor.model.model_path=models/sft_sS runner.seed=S ...   (per RL config)

The RL configs are the shipped recipes (PushCube: maniskill_ppo_from_sft, the main job's config;
PickCube: maniskill_ppo_pick_cube and maniskill_grpo_pick_cube). This script adds only sizes and
the start: the SFT policy, the seed, the step count, when and how much to evaluate (SIZE_KEYS);
tests/test_learning_args.py holds every other key of a phase equal to its config's. Ablations
add their change explicitly with --rl-set.

Held-out evaluation: env.eval draws fixed reset ids (use_fixed_reset_state_ids) from its own
seeded stream over the eval split, seeds [2^30, 2^31 - 1); the demos use reset ids
0 .. D+failures of the train split. Every evaluation (SFT and every RL phase, every step)
scores the same initial states: eval sub-envs x --eval-epochs episodes.

    python benchmarks/learning.py                        # PushCube: PPO, 90 steps, 3 seeds
    python benchmarks/learning.py --task pick_cube       # PickCube: PPO and GRPO, 30 steps each
    python benchmarks/learning.py --seeds 0 --minimal    # smallest size (tests/test_learning.py)

Writes <out>/results.json and <out>/learning.png and prints the before/after table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Task:
    """What differs between tasks: where the demos come from, the SFT size and the RL configs."""

    sft_config: str
    demo_dir: str
    demos: int            # default number of expert demonstrations
    sft_steps: int        # default SFT optimizer steps (64 samples each): a deliberately weak policy
    rl_configs: dict[str, str]  # algorithm -> the shipped recipe config of this task
    rl_steps: dict[str, int] = field(default_factory=dict)  # training steps where not the config's own


TASKS = {
    # The main job's config runs 25 steps (its 10 minutes); the recipe's gain kept growing to step 90.
    "push_cube": Task("maniskill_sft_tiny", "demos/push_cube_64", 100, 300, {"ppo": "maniskill_ppo_from_sft"}, {"ppo": 90}),
    "pick_cube": Task("maniskill_sft_pick_cube_tiny", "demos/pick_cube_64", 200, 3000,
                      {"ppo": "maniskill_ppo_pick_cube", "grpo": "maniskill_grpo_pick_cube"}),
}
ALGOS = ("ppo", "grpo")
# The keys a phase sets beyond its config: the start, the seed, the length, the evaluation
# schedule and size (the same held-out states as the SFT run), the run name.
SIZE_KEYS = ("actor.model.model_path", "runner.seed", "runner.max_steps", "runner.val_check_interval",
             "algorithm.eval_rollout_epoch", "env.eval.total_num_envs", "runner.experiment_name")
# --minimal shrinks the update to one rollout epoch of the fewest sub-envs, on one slot (one worker
# of each kind): the code path only.
MINIMAL_KEYS = ("cluster.num_cpu_slots", "algorithm.rollout_epoch", "algorithm.n_minibatches", "env.train.groups_per_stage",
                "runner.critic_warmup")
ONE_SLOT = "cluster.num_cpu_slots=1"


def cli(*args: str, cwd: Path, log: Path) -> float:
    """Run `embodied-rl ARGS` in cwd (output to log); returns its wall time in seconds."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"learning: `embodied-rl {' '.join(args)}` failed ({proc.returncode}); see {log}")
    return time.perf_counter() - t0


def metrics(run: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): r for r in rows}


def evals(rows: dict[int, dict]) -> list[tuple[int, float, float, float, float | None]]:
    """(step, success_once, return, episodes, sampled success_once or None) of every
    evaluation in a run's metrics; the first three of the primary (greedy) scoring."""
    return [(s, r["eval/success_once"], r["eval/return"], r["eval/num_trajectories"], r.get("eval/sampled/success_once"))
            for s, r in sorted(rows.items()) if "eval/success_once" in r]


def run_sft(seed: int, a: argparse.Namespace, work: Path) -> dict:
    """SFT of seed `seed` on the demos, then its export: the start of both RL phases."""
    logs = work / "logs"
    out: dict = {"seed": seed, "time_s": {}}
    sft = f"sft_s{seed}"
    if not (a.reuse_sft and (work / "models" / sft / "config.json").is_file()):  # else: this seed's SFT, as exported before
        out["time_s"]["sft"] = cli("sft", TASKS[a.task].sft_config, f"runner.seed={seed}", f"runner.experiment_name={sft}",
                                   f"runner.max_steps={a.sft_steps}", f"runner.val_check_interval={a.sft_steps}",
                                   f"algorithm.eval_rollout_epoch={a.eval_epochs}", *([ONE_SLOT] if a.minimal else []),
                                   cwd=work, log=logs / f"{sft}.log")
        out["time_s"]["export"] = cli("export", f"runs/{sft}", f"models/{sft}", cwd=work, log=logs / f"export_s{seed}.log")
    out["sft_evals"] = evals(metrics(work / "runs" / sft))
    # Every phase evaluates the same sub-envs (reset ids depend on the run-wide sub-env index
    # only), so SFT, PPO and GRPO are scored on the same initial states.
    out["eval_envs"] = _config(work / "runs" / sft)["env"]["eval"]["total_num_envs"]
    return out


def rl_config(algo: str, a: argparse.Namespace) -> str:
    return TASKS[a.task].rl_configs[algo]


def rl_args(algo: str, seed: int, eval_envs: int, a: argparse.Namespace) -> list[str]:
    """The `embodied-rl train` arguments of one RL phase from seed `seed`'s SFT export: the
    recipe config with SIZE_KEYS (and, with --minimal, MINIMAL_KEYS), then --rl-set."""
    task = TASKS[a.task]
    steps = a.rl_steps or task.rl_steps.get(algo)
    sizes = [f"actor.model.model_path=models/sft_s{seed}", f"runner.seed={seed}",
             *([f"runner.max_steps={steps}"] if steps else []), f"runner.val_check_interval={a.eval_every}",
             f"algorithm.eval_rollout_epoch={a.eval_epochs}", f"env.eval.total_num_envs={eval_envs}",
             f"runner.experiment_name={algo}_s{seed}"]
    minimal = [ONE_SLOT, "algorithm.rollout_epoch=1", "algorithm.n_minibatches=1", "env.train.groups_per_stage=1",
               "runner.critic_warmup=0"] if a.minimal else []
    return ["train", rl_config(algo, a), *sizes, *minimal, *a.rl_set]


def run_rl(algo: str, out: dict, a: argparse.Namespace, work: Path) -> None:
    """One RL phase from seed out["seed"]'s SFT export; adds its evaluations and training curves to out."""
    name = f"{algo}_s{out['seed']}"
    out["time_s"][algo] = cli(*rl_args(algo, out["seed"], out["eval_envs"], a), cwd=work, log=work / "logs" / f"{name}.log")
    m = metrics(work / "runs" / name)
    out[f"{algo}_evals"] = evals(m)
    out[f"{algo}_env_steps_per_step"] = _env_steps(work / "runs" / name)
    out[f"{algo}_train"] = {s: {k: v for k, v in r.items() if k in ("env/success_once", "env/return", "train/critic/value_loss",
                                                                     "rollout/explained_variance", "train/actor/entropy")}
                            for s, r in m.items() if s > 0}


def _config(run: Path) -> dict:
    import yaml

    return yaml.safe_load((run / "config.yaml").read_text())


def _env_steps(run: Path) -> int:
    """Env steps one training step collects: sub-envs x chunk steps x chunk length x rollout epochs."""
    cfg = _config(run)
    env, model = cfg["env"]["train"], cfg["actor"]["model"]
    chunks = math.ceil(env["max_episode_steps"] / model["num_action_chunks"])
    return env["total_num_envs"] * chunks * model["num_action_chunks"] * cfg["algorithm"]["rollout_epoch"]


def summarise(results: list[dict]) -> str:
    def mean_sd(xs: list[float]) -> str:
        xs = [100 * x for x in xs]
        return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else f"{xs[0]:.1f}"

    sft = [r["sft_evals"][-1][1] for r in results]
    rows = ["| phase | held-out success % (mean ± sd over seeds) | change, points |", "|---|---|---|",
            f"| SFT | {mean_sd(sft)} | |"]
    for algo in ALGOS:
        done = [r for r in results if f"{algo}_evals" in r]  # an interrupted run may lack later phases
        if not done:
            continue
        seeds = "" if len(done) == len(results) else f" (seeds {[r['seed'] for r in done]})"
        # greedy (the primary scoring), then sampled where the phase scored it
        for col, label in ((1, ""), (4, ", sampled")):
            if any(r[f"{algo}_evals"][0][col] is None for r in done):
                continue
            before = [r[f"{algo}_evals"][0][col] for r in done]
            after = [r[f"{algo}_evals"][-1][col] for r in done]
            gain = [b - a for a, b in zip(before, after)]
            rows.append(f"| {algo.upper()}{label} before (step 0){seeds} | {mean_sd(before)} | |")
            rows.append(f"| {algo.upper()}{label} after{seeds} | {mean_sd(after)} | {mean_sd(gain)} |")
    episodes = int(results[0]["sft_evals"][-1][3])
    phases = dict.fromkeys(k for r in results for k in r["time_s"])
    times = {k: statistics.mean(r["time_s"][k] for r in results if k in r["time_s"]) / 60 for k in phases}
    rows.append("")
    rows.append(f"{episodes} held-out episodes per evaluation; seeds {[r['seed'] for r in results]}; mean wall time per seed (min): "
                + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))
    return "\n".join(rows)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, r in enumerate(results):
        s, color = r["seed"], f"C{i}"  # one colour per seed in every panel
        steps, success = [e[0] for e in r["sft_evals"]], [e[1] for e in r["sft_evals"]]
        axes[0].plot(steps, [100 * x for x in success], "o-", color=color, label=f"seed {s}")
        for algo, style in (("ppo", "-"), ("grpo", "--")):
            if f"{algo}_evals" not in r:
                continue
            ev = r[f"{algo}_evals"]
            env_steps = [st * r[f"{algo}_env_steps_per_step"] for st, *_ in ev]
            axes[1].plot(env_steps, [100 * e[1] for e in ev], style, marker="o", color=color, label=f"{algo.upper()} greedy seed {s}")
            if all(e[4] is not None for e in ev):
                axes[1].plot(env_steps, [100 * e[4] for e in ev], ":", marker="s", color=color, label=f"{algo.upper()} sampled seed {s}")
            axes[2].plot(env_steps, [e[2] for e in ev], style, marker="o", color=color, label=f"{algo.upper()} seed {s}")
    axes[0].set(title="SFT: held-out success", xlabel="SFT optimizer steps", ylabel="success %")
    axes[1].set(title="RL from SFT: held-out success", xlabel="env steps", ylabel="success %")
    axes[2].set(title="RL from SFT: held-out return", xlabel="env steps", ylabel="episode return")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive count")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the task's defaults filled in."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=list(TASKS), default="push_cube")
    p.add_argument("--out", type=Path, default=None, help="working directory (demos/, models/, runs/ are made in it); default runs/learning_TASK")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--demos", type=_positive, default=None, help="expert demonstrations (default: the task's, 100 PushCube, 200 PickCube)")
    p.add_argument("--sft-steps", type=_positive, default=None, help="SFT optimizer steps of 64 samples (default: the task's, 300 PushCube, 3000 PickCube)")
    p.add_argument("--rl-steps", type=_positive, default=None, help="training steps of every RL phase (default: PushCube PPO 90; else the config's)")
    p.add_argument("--reuse-sft", action="store_true", help="take each seed's SFT run and export from --out when they exist (same SFT settings)")
    p.add_argument("--eval-every", type=_positive, default=10, help="RL steps between evaluations (and after the last)")
    p.add_argument("--eval-epochs", type=_positive, default=16, help="eval rollout epochs: episodes = eval sub-envs x this")
    p.add_argument("--algos", nargs="+", choices=ALGOS, default=None, help="RL phases to run from the SFT policy (default: every config of the task)")
    p.add_argument("--rl-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a change to the recipe added to every RL phase (repeatable), e.g. algorithm.entropy_bonus=0.01: an ablation")
    p.add_argument("--minimal", action="store_true", help="2 demos, 1 SFT step, 1 RL step of 1 rollout epoch, 1 eval epoch: the code path only")
    a = p.parse_args(argv)
    task = TASKS[a.task]
    a.out = a.out or Path(f"runs/learning_{a.task}")
    a.demos = task.demos if a.demos is None else a.demos
    a.sft_steps = task.sft_steps if a.sft_steps is None else a.sft_steps
    a.algos = a.algos or list(task.rl_configs)
    missing = [algo for algo in a.algos if algo not in task.rl_configs]
    if missing:
        p.error(f"--algos {' '.join(missing)}: no shipped {a.task} config for it; the task has {', '.join(task.rl_configs)}")
    if a.minimal:
        a.demos, a.sft_steps, a.rl_steps, a.eval_every, a.eval_epochs = 2, 1, 1, 1, 1
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    task = TASKS[a.task]
    work = a.out.resolve()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    demo_s = 0.0
    if not (work / task.demo_dir).is_dir():
        demo_s = cli("demos", task.sft_config, "--num-demos", str(a.demos), "--out", task.demo_dir, "--quiet",
                     cwd=work, log=work / "logs" / "demos.log")
    def save() -> None:
        (work / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": results}, indent=1))

    # Phase by phase over the seeds, so that an interrupted run still holds every seed's SFT and PPO.
    results = []
    for seed in a.seeds:
        results.append(run_sft(seed, a, work))
        results[-1]["time_s"]["demos"] = demo_s / len(a.seeds)
        save()
    for algo in a.algos:
        for out in results:
            run_rl(algo, out, a, work)
            save()
    table = summarise(results)
    plot(results, work / "learning.png")
    print(table)
    print(f"\ntotal wall time {(time.perf_counter() - t0) / 60:.1f} min; results: {work / 'results.json'}, plot: {work / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
