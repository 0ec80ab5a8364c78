"""Environment fix-ups that must run before third-party imports.

PyPI only ships CUDA builds of torchvision for Linux x86_64. Next to the CPU build of
torch its compiled ops cannot load, and `torchvision/_meta_registrations.py` then fails
at import on the two ops it registers unconditionally (`nms`, `qnms`). timm imports
torchvision, so without this nothing model-related imports on a CPU box. We declare the
two op schemas so the import succeeds; calling those ops still raises torchvision's own
"Couldn't load custom C++ ops" error, so nothing silently misbehaves (we never use them).
"""
from __future__ import annotations

import importlib.util


def ensure_torchvision_importable() -> None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None:
        return
    import torch

    if torch.cuda.is_available():
        return
    for op in ("nms", "qnms"):
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
        except RuntimeError:
            torch.library.define(
                f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            )
