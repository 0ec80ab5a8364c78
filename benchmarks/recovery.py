"""Cost of recovering from a dead worker: seconds from SIGKILL to the next completed step.

Trains the tiny policy on ManiSkill PickCube (2 env workers, 1 rollout worker, 2 actor ranks,
a checkpoint every step) through the real CLI and SIGKILLs one worker process (`--victim`) as
soon as the checkpoint of step `--kill-after` exists, i.e. during the next step. The run
restarts its groups, resumes from that checkpoint and finishes. Baseline, measured in the same
run: the median wall time of the steps before the kill (time between consecutive rows of
metrics.jsonl). Printed: recovery seconds (kill -> the repeated step logged) and its ratio to
one normal step.

    python benchmarks/recovery.py [--victim EnvWorker|RolloutWorker|ActorWorker] [--kill-after 2] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embodied_rl.runtime.groups import run_worker_pids

CONFIG = """\
defaults:
  - env/maniskill_pick_cube@env.train
  - env/maniskill_pick_cube@env.eval
cluster:
  component_placement: {{actor: 0-1, env: 0-1, rollout: 0}}
runner:
  output_dir: {out}
  max_steps: {steps}
  save_interval: 1
  max_restarts: 1
  seed: 5
  logger:
    logger_backends: [console]
algorithm: {{adv_type: gae, reward_type: chunk_level}}
env:
  train:
    total_num_envs: 4
    auto_reset: true
    max_episode_steps: 16
    init_params: {{camera_heights: 64, camera_widths: 64}}
    video_cfg: {{save_video: false}}
actor:
  micro_batch_size: 4
  global_batch_size: 8
  model:
    model_path: {model}
    create_preset: {{name: tiny, image_size: 64}}
    add_value_head: true
    value_type: chunk_level
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--victim", default="EnvWorker", choices=["EnvWorker", "RolloutWorker", "ActorWorker"])
    ap.add_argument("--kill-after", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override of the run (repeatable): fewer workers for a smoke run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recovery_bench_"))
    steps = args.kill_after + 2
    (work / "rec.yaml").write_text(CONFIG.format(out=work / "runs", model=work / "tiny-oft", steps=steps))
    name = "bench_rec"
    run = work / "runs" / name
    proc = subprocess.Popen([sys.executable, "-m", "embodied_rl.cli", "train", str(work / "rec.yaml"),
                             f"runner.experiment_name={name}", *args.set], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, WANDB_MODE="offline"))
    marker = run / "checkpoints" / f"global_step_{args.kill_after:08d}" / "meta.json"
    while not marker.is_file():
        if proc.poll() is not None:
            sys.exit(f"run ended before step {args.kill_after}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.1)
    pid = run_worker_pids(name, args.victim)[-1]
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    out, _ = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"run failed:\n{out[-3000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = {int(r["step"]): r["time"] for r in rows}
    normal = statistics.median(times[s + 1] - times[s] for s in range(1, args.kill_after))
    recovered = times[args.kill_after + 1] - killed
    print(f"victim {args.victim} (pid {pid}) killed during step {args.kill_after + 1} of {steps}")
    print(f"normal step (median of steps 2..{args.kill_after}): {normal:.1f} s")
    print(f"kill -> step {args.kill_after + 1} logged after the restart: {recovered:.1f} s")
    print(f"recovery / normal step: {recovered / normal:.2f}x; restarts logged: {rows[-1].get('recovery/restarts')}")


if __name__ == "__main__":
    main()
