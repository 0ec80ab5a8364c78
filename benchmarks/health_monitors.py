"""Health monitors: false alarms on recorded healthy runs, and their cost per training step.

For every run directory given (its metrics.jsonl, as `embodied-rl train` wrote it), the default
runner.health monitors replay the run's steps in order, as the runner applies them, and every
alarm is printed: on a healthy recipe run each one is a false alarm. The cost is the seconds
the watch takes per step (median of 200 replays of the runs' steps), against the runs' median
step time (time/step_s) measured in those same runs: their ratio is the monitoring overhead.

    python benchmarks/health_monitors.py RUN_DIR [RUN_DIR ...]
    python benchmarks/health_monitors.py            # the main job's 40 recorded steps (tests/data)
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from embodied_rl.config.schema.health import HealthConfig
from embodied_rl.health import HealthWatch

RECORDED = Path(__file__).resolve().parents[1] / "tests" / "data" / "health_recipe_push_cube.jsonl"


def steps_of(path: Path) -> list[dict[str, float]]:
    """The training steps of a run (step 0, the evaluation before training, is not one)."""
    file = path / "metrics.jsonl" if path.is_dir() else path
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if isinstance(v, float | int)} for r in rows if r.get("step", 1) > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, default=[RECORDED])
    args = parser.parse_args()
    runs = {str(p): steps_of(p) for p in args.runs}
    total = alarms = 0
    for name, steps in runs.items():
        watch = HealthWatch(HealthConfig())
        fired = [a for i, m in enumerate(steps, start=1) for a in watch.observe(i, m)]
        total, alarms = total + len(steps), alarms + len(fired)
        print(f"{name}: {len(steps)} steps, {len(fired)} alarms")
        for a in fired:
            print(f"  {a.line()}")
    print(f"false alarms: {alarms} in {total} steps ({alarms / max(1, total):.3f} per step)")

    every = [m for steps in runs.values() for m in steps]
    costs = []
    for _ in range(200):
        watch = HealthWatch(HealthConfig())
        t0 = time.perf_counter()
        for i, m in enumerate(every, start=1):
            watch.observe(i, m)
        costs.append((time.perf_counter() - t0) / len(every))
    per_step = statistics.median(costs)
    step_s = [m["time/step_s"] for m in every if "time/step_s" in m]
    if step_s:
        step = statistics.median(step_s)
        print(f"monitoring: {per_step * 1e6:.1f} us per step; median step {step:.1f} s; overhead ratio {per_step / step:.2e}")
    else:
        print(f"monitoring: {per_step * 1e6:.1f} us per step (no time/step_s in these runs to compare with)")


if __name__ == "__main__":
    main()
