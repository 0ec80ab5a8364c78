"""Answers that cost seconds to compute and depend only on installed files, kept across processes.

A `FactCache` is one JSON file, in the per-user cache directory (process_env.embodied_rl_home(),
default ~/.cache/embodied_rl) where the callers put theirs, holding named answers and the fingerprint of what they were computed from
(file sizes and mtimes, package versions: the caller says). A fingerprint that differs drops
the whole file. Several processes may write it: each replaces it atomically with what it knows,
so an answer is at worst computed again. An unwritable directory only costs the recomputation.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


class FactCache:
    """`get(key, compute)`: the stored answer, or compute() stored under `key`. `live()` true
    means computing is free now (what it needs is loaded already): the live answer is returned,
    and stored where it differs."""

    def __init__(self, path: Path, fingerprint: str | None, live: Callable[[], bool] = lambda: False) -> None:
        self.path, self.fingerprint, self.live = path, fingerprint, live
        self.facts: dict[str, Any] = {}
        if fingerprint is None:
            return
        try:
            stored = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(stored, dict) and stored.get("fingerprint") == fingerprint and isinstance(stored.get("facts"), dict):
            self.facts = stored["facts"]

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key in self.facts and not self.live():
            return self.facts[key]
        value = compute()
        if self.fingerprint is not None and (key not in self.facts or self.facts[key] != value):
            self.facts[key] = value
            self._write()
        return value

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "facts": self.facts}, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass


__all__ = ["FactCache"]
