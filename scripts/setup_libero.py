#!/usr/bin/env python3
"""Make LIBERO importable without prompts or downloads (idempotent; run by scripts/setup.sh).

Links the asset wheels' directory to <site-packages>/libero/libero/assets and writes
$LIBERO_CONFIG_PATH/config.yaml (default ${EMBODIED_RL_HOME:-~/.cache/embodied_rl}/libero)
with the five keys LIBERO reads. The logic lives in embodied_rl.envs.libero.setup, which the
LIBERO backend also calls at import, so set-up and runtime can never disagree.
"""
from __future__ import annotations

import sys

import embodied_rl  # noqa: F401  (import order: torchvision shim first)
from embodied_rl.errors import UserError


def main() -> int:
    try:
        from embodied_rl.envs.libero.setup import ensure_libero_ready
    except ModuleNotFoundError as err:
        print(f"setup_libero: error: {err}; is the package installed with the libero extra?", file=sys.stderr)
        return 1
    try:
        paths = ensure_libero_ready()
    except UserError as err:
        print(f"setup_libero: error: {err}", file=sys.stderr)
        return 1
    print(f"setup: LIBERO config {paths.config_file}, assets {paths.assets_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
