"""What passes through the driver: payload bytes of the arguments it sends to worker groups
and of the results it gets back.

The driver should carry control messages and metrics only; trajectories and weights travel
between workers (channels, object-store references). The runner reports these counters per
training step (driver/bytes_sent, driver/bytes_received) so a regression shows in the metrics.
Sizes are payload estimates (array and tensor bytes, string lengths), not Ray's wire format.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import ray

REFERENCE_BYTES = 28  # an object reference: its id, not the object


def payload_bytes(obj: Any) -> int:
    """Bytes of the data in `obj`: arrays and tensors by their buffers, containers summed."""
    if isinstance(obj, ray.ObjectRef):
        return REFERENCE_BYTES
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (bytes, bytearray, memoryview, str)):
        return len(obj)
    if isinstance(obj, dict):
        return sum(payload_bytes(k) + payload_bytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(payload_bytes(x) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(payload_bytes(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return 8 if isinstance(obj, (int, float, bool, type(None))) else sys.getsizeof(obj)


@dataclasses.dataclass
class DriverTraffic:
    sent: int = 0
    received: int = 0

    def reset(self) -> None:
        self.sent = self.received = 0

    def metrics(self) -> dict[str, float]:
        return {"driver/bytes_sent": float(self.sent), "driver/bytes_received": float(self.received)}


#: This process's counters (the driver's; worker processes never read theirs).
TRAFFIC = DriverTraffic()
