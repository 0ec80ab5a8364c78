"""Environment fix-ups that must run before third-party imports.

PyPI only ships CUDA builds of torchvision for Linux x86_64. Next to the CPU build of
torch its compiled ops cannot load, and `torchvision/_meta_registrations.py` then fails
at import on the two ops it registers unconditionally (`nms`, `qnms`). timm imports
torchvision, so without this nothing model-related imports on a CPU box. We declare the
two op schemas so the import succeeds; calling those ops still raises torchvision's own
"Couldn't load custom C++ ops" error, so nothing silently misbehaves (we never use them).

The fix runs lazily, right before the first `import torchvision`, so commands that never
touch torch (e.g. `embodied-rl review`) do not pay torch's import time.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys


def _declare_missing_ops() -> None:
    import torch

    if torch.cuda.is_available():
        return
    for op in ("nms", "qnms"):
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
        except RuntimeError:
            torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs `_declare_missing_ops` once, when torchvision is first imported, then steps aside."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torchvision":
            return
        sys.meta_path.remove(self)
        _declare_missing_ops()
        return  # let the normal finders import torchvision


def ensure_torchvision_importable() -> None:
    if "torchvision" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    if not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())
