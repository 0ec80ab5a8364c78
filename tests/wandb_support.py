"""Reading an offline wandb run back from its `.wandb` transaction log.

wandb >= 0.19 has no Python reader (its Go core writes the file), so this follows the format
it documents: a 7-byte header, then LevelDB log blocks of 32 KiB, each chunk
`crc32(type + data) | uint16 length | type (1 full, 2 first, 3 middle, 4 last)`, and every
record a `wandb_internal_pb2.Record`. Checksums are verified.
"""
from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

_BLOCK, _HEADER = 32768, b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1, version 0


def wandb_records(path: Path) -> list:
    """Every protobuf record of one `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data.startswith(_HEADER), data[:7]
    records, pos, parts = [], len(_HEADER), b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        crc, size, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (crc, size, kind) == (0, 0, 0):  # block trailer padding
            pos += left
            continue
        payload = data[pos + 7:pos + 7 + size]
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) == crc, f"bad checksum at byte {pos} of {path}"
        parts += payload
        pos += 7 + size
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def wandb_runs(root: Path, timeout_s: float = 30.0) -> list[tuple[str, str]]:
    """(project, run name) of every offline wandb run under root, as wandb would upload them.

    wandb's service process may still be writing a run file when finish() returns (seen on a
    loaded machine), so this waits until every run directory's file holds its run record.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        files = sorted(p for p in root.rglob("offline-run-*/run-*.wandb") if not p.parent.is_symlink())
        runs = [(r.run.project, r.run.display_name) for f in files if f.stat().st_size > len(_HEADER)
                for r in wandb_records(f) if r.WhichOneof("record_type") == "run"]
        if len(runs) >= len(files) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)
