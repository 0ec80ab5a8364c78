#!/usr/bin/env python3
"""Regenerate docs/CONFIG.md from the config schema: python scripts/gen_config_docs.py [--check]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import embodied_rl  # noqa: F401  (import order: torchvision shim first)
from embodied_rl.config_docs import render_config_docs

DOC = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/CONFIG.md is out of date")
    args = parser.parse_args()
    text = render_config_docs()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC} is out of date; run: python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
