"""PPO's training time per step with gradient accumulation over micro-batches vs none.

The learning recipe's PPO phase (benchmarks/learning.py: 64 episodes per update, 320 chunk
samples, 4 minibatches of 80 x 4 update epochs, the asymmetric critic) through the real CLI on
ManiSkill PushCube-v1, once with the shipped `actor.micro_batch_size: 5` of maniskill_ppo_tiny
(each rank accumulates 8 micro-batches of 5 per optimizer step, and FSDP reduces the gradients
after each) and once with `null` (each rank's whole share of a minibatch, 40, in one pass). The
policy starts from the same random tiny preset and seed in both. Runs alternate and swap order
every round; the ratio uses the summed `time/train_s` of the steps after the first (warm-up).
It also prints how far the first step's losses of the two settings are apart: the update is
the same up to the order of floating-point sums.

    python benchmarks/actor_micro_batch.py [--steps 4] [--rounds 1] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = ["env.train=maniskill_push_cube", "env.eval=maniskill_push_cube", "env.train.total_num_envs=16",
          "algorithm.rollout_epoch=4", "actor.global_batch_size=80", "algorithm.update_epoch=4", "runner.critic_warmup=0",
          "env.train.init_params.reward_mode=normalized_dense", "env.train.ignore_terminations=true",
          "algorithm.sampling_params.temperature_train=0.5", "actor.model.top_k=3",
          "actor.model.value_input=privileged_state", "actor.model.privileged_state_dim=36",
          "+env.train.init_params.privileged_state=true", "algorithm.value_clip=null", "algorithm.reward_norm=running",
          "algorithm.reward_scale=true", "env.train.video_cfg.save_video=false", "runner.val_check_interval=-1",
          "runner.seed=0"]
SETTINGS = {"micro 5 (shipped)": "actor.micro_batch_size=5", "micro null (whole share)": "actor.micro_batch_size=null"}


def run(overrides: list[str], steps: int, work: Path, index: int) -> list[dict]:
    """The recipe's PPO with `overrides` for `steps` steps; its metrics rows."""
    name = f"mb_{index}"  # one run dir per run: a reused name would resume or append to the last
    cmd = [sys.executable, "-m", "embodied_rl.cli", "train", "maniskill_ppo_tiny", *RECIPE, *overrides,
           f"runner.max_steps={steps}", f"runner.experiment_name={name}", f"actor.model.model_path={work / 'model'}"]
    log = work / f"{name}.log"
    with open(log, "w") as f:
        if subprocess.run(cmd, cwd=work, stdout=f, stderr=subprocess.STDOUT, check=False).returncode:
            sys.exit(f"`{' '.join(cmd[1:])}` failed:\n{log.read_text()[-4000:]}")
    lines = (work / "runs" / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4, help="training steps per run (the first is not timed)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override after the recipe's (repeatable): smaller sizes for a smoke run")
    args = p.parse_args()
    train: dict[str, list[float]] = {s: [] for s in SETTINGS}
    step: dict[str, list[float]] = {s: [] for s in SETTINGS}
    first: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        order = list(SETTINGS)
        for r in range(args.rounds):
            for i, setting in enumerate(order if r % 2 == 0 else order[::-1]):
                rows = run([SETTINGS[setting], *args.set], args.steps, work, index=r * len(order) + i)
                first.setdefault(setting, rows[0])
                train[setting] += [row["time/train_s"] for row in rows[1:]]
                step[setting] += [row["time/step_s"] for row in rows[1:]]
                print(f"round {r} {setting}: train_s {[round(row['time/train_s'], 2) for row in rows]}", flush=True)
    base, new = SETTINGS
    for s in SETTINGS:
        print(f"{s:26s} train {statistics.median(train[s]):6.2f} s/step (median), whole step {statistics.median(step[s]):6.2f} s")
    print(f"training time ratio {base} / {new}: {sum(train[base]) / sum(train[new]):.2f}x; "
          f"whole step {sum(step[base]) / sum(step[new]):.2f}x")
    keys = ("train/actor/policy_loss", "train/critic/value_loss", "train/actor/entropy", "train/actor/approx_kl")
    print("first step, " + ", ".join(f"{k.split('/')[-1]} {first[base][k]:.6g} vs {first[new][k]:.6g}" for k in keys))


if __name__ == "__main__":
    main()
