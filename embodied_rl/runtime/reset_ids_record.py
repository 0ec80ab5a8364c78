"""<run dir>/reset_ids.json: per env mode, its reset-id split and every reset id an episode
started from, merged across resumes and restarts (the ids already in the file are kept)."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

RESET_IDS_FILE = "reset_ids.json"


def record_reset_ids(run_dir: Path, used_parts: Iterable[dict[str, Iterable[int]]], splits: dict[str, str]) -> None:
    """Merge each env worker's {mode: used ids} into the file; `splits` maps mode -> reset_id_split."""
    path = run_dir / RESET_IDS_FILE
    before = json.loads(path.read_text()) if path.is_file() else {}
    used: dict[str, set[int]] = {mode: set(entry["ids"]) for mode, entry in before.items()}
    for part in used_parts:
        for mode, ids in part.items():
            used.setdefault(mode, set()).update(ids)
    record = {mode: {"reset_id_split": splits[mode], "num_ids": len(ids), "ids": sorted(ids)}
              for mode, ids in sorted(used.items())}
    path.write_text(json.dumps(record) + "\n")
