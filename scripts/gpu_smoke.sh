#!/usr/bin/env bash
# The GPU smoke (scripts/gpu_smoke.py): one command, made for a bare single-GPU machine with
# PyTorch, transformers, peft, timm and safetensors (nothing is installed or downloaded).
#   bash scripts/gpu_smoke.sh [--cpu] [--keep DIR]
# Uses .venv's python when this checkout has one, else python3; stops after 8 minutes.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$REPO/.venv/bin/python" ]] && echo "$REPO/.venv/bin/python" || echo python3)}"
exec timeout 480 "$PY" "$REPO/scripts/gpu_smoke.py" "$@"
