"""CPU a process spends importing before it does any work, for the two light processes of a run:
an env worker (it relays numpy arrays between its simulator processes and the channels), the
config check every command runs first (`print-config`, the start of `train` and `eval`), and
`embodied-rl plan` (the config check with the memory plan of the main job).

Each case runs in fresh interpreters, alternating with its baseline, which adds what the process
imported before it was made lighter: torch for the env worker, transformers' LlamaConfig for the
check of a checkpoint against its preset, the actor's distributed stack (FSDP, DTensor, distributed
checkpoints: the config rules reached it through the training updates' registry) for the plan. Prints the median CPU seconds (user + sys) of each and
the ratio light / baseline.

    python benchmarks/process_start.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "models" / "tiny-oft-push-cube-sft"
CHECK = ("from embodied_rl.configure import load_config\n"
         f"load_config('maniskill_ppo_tiny', ['actor.model.model_path={SFT}', 'actor.model.create_preset.image_size=64'])\n")
PLAN = "from embodied_rl.cli import main\nmain(['plan', 'maniskill_ppo_from_sft'])\n"
CASES = {
    "env worker": ("import embodied_rl.workers.env_worker\n",
                   "import torch\nimport embodied_rl.workers.env_worker\n"),
    "config check": (CHECK, "import embodied_rl\nfrom transformers import LlamaConfig\nLlamaConfig()\n" + CHECK),
    "plan": (PLAN, "import torch.distributed.checkpoint\nimport torch.distributed.fsdp\n" + PLAN),
}


def cpu_seconds(code: str) -> float:
    """User + system CPU of one fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    for name, (light, baseline) in CASES.items():
        times: dict[str, list[float]] = {"light": [], "baseline": []}
        for _ in range(args.rounds):
            times["light"].append(cpu_seconds(light))
            times["baseline"].append(cpu_seconds(baseline))
        lo, base = statistics.median(times["light"]), statistics.median(times["baseline"])
        print(f"{name}: {lo:.2f} s CPU vs {base:.2f} s with the old imports: {lo / base:.2f}x")


if __name__ == "__main__":
    main()
