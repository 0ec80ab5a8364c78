"""Per-factor success of one policy under every distribution shift of a ManiSkill task.

    .venv/bin/python scripts/eval_shifts.py TASK_PREFIX [CONFIG] [key=value ...] [--out-dir DIR]

e.g. `scripts/eval_shifts.py maniskill_push_cube maniskill_ppo_from_sft algorithm.eval_rollout_epoch=2`.
Runs `embodied-rl eval CONFIG env.eval=<name> key=value ...` for the unshifted env config
TASK_PREFIX and for every `TASK_PREFIX_shift_*` in env_configs/, one after the other, each in
its own run directory under DIR; all share the checkpoint and, with
env.eval.use_fixed_reset_state_ids=true (set here), the held-out reset ids. Then prints one row
per factor (success_once, its 95 % Wilson interval, episodes) and writes the rows to
DIR/shifts.json. A run that fails is reported in its row; the others still run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from embodied_rl.config.loader import ENV_CONFIG_DIR, available, read_env_config
from embodied_rl.envs.maniskill.params import ShiftParams, shift_keys
from embodied_rl.evaluation.intervals import format_rate, wilson_interval


def last_eval(metrics: Path) -> dict | None:
    """The last record of metrics.jsonl holding eval/success_once."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    rows = [r for r in rows if "eval/success_once" in r]
    return rows[-1] if rows else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", help="unshifted env config, e.g. maniskill_push_cube")
    parser.add_argument("args", nargs="*", help="[CONFIG] [key=value ...] as for embodied-rl eval")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: runs/shifts/<prefix>-<time>")
    ns = parser.parse_args(argv)
    names = [ns.prefix, *sorted(n for n in available(ENV_CONFIG_DIR) if n.startswith(f"{ns.prefix}_shift_"))]
    if len(names) == 1:
        parser.error(f"no env_configs/{ns.prefix}_shift_*.yaml")
    out = ns.out_dir or Path("runs/shifts") / f"{ns.prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    config = ns.args[:1] if ns.args and "=" not in ns.args[0] else []
    overrides = ns.args[len(config):]
    base = read_env_config(ENV_CONFIG_DIR / f"{ns.prefix}.yaml")
    rows = []
    for name in names:
        factor = name.removeprefix(f"{ns.prefix}_shift_") if name != ns.prefix else "none"
        keys = sorted(shift_keys(read_env_config(ENV_CONFIG_DIR / f"{name}.yaml"), base))
        cmd = [sys.executable, "-m", "embodied_rl.cli", "eval", *config, f"env.eval={name}",
               "env.eval.use_fixed_reset_state_ids=true", f"runner.output_dir={out}", f"runner.experiment_name={factor}", *overrides]
        print(f"[{len(rows) + 1}/{len(names)}] {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
        t0 = time.time()
        code = subprocess.run(cmd, check=False).returncode
        row = {"env_config": name, "factor": factor, "family": "/".join(sorted({ShiftParams.family(k) for k in keys})) or "-",
               "keys": keys, "exit_code": code, "seconds": round(time.time() - t0)}
        record = last_eval(out / factor / "metrics.jsonl") if code == 0 else None
        if record is not None:
            n = round(record["eval/num_trajectories"])
            k = round(record["eval/success_once"] * n)
            assert abs(wilson_interval(k, n)[0] - record["eval/success_once_ci95_low"]) < 1e-6, "counts do not match the logged interval"
            row.update(successes=k, episodes=n, success_once=k / n,
                       ci95_low=record["eval/success_once_ci95_low"], ci95_high=record["eval/success_once_ci95_high"])
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "shifts.json").write_text(json.dumps({"prefix": ns.prefix, "args": ns.args, "rows": rows}, indent=1) + "\n")
    print("\n| factor | family | changes | success_once, 95 % Wilson interval (successes/episodes) |\n|---|---|---|---|")
    for r in rows:
        result = format_rate(r["successes"], r["episodes"]) if "successes" in r else f"failed (exit {r['exit_code']})"
        print(f"| {r['factor']} | {r['family']} | {', '.join(r['keys']) or '-'} | {result} |")
    print(f"\nwritten: {out / 'shifts.json'}")
    return 0 if all("successes" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
