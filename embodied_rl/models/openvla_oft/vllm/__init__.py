"""vLLM rollout backend for OpenVLA-OFT (imports vLLM: load only when that backend is chosen)."""
from __future__ import annotations

from typing import Any


def register() -> None:
    """Register the model class object (not a "module:Class" string, which vLLM inspects in a
    subprocess that takes ~10 s), and make vLLM's CPU kernel scan safe in this process."""
    from vllm import ModelRegistry

    from embodied_rl.models.openvla_oft.vllm.layout import ARCHITECTURE
    from embodied_rl.models.openvla_oft.vllm.model import OpenVLAOFTActionReadout

    _guard_kernel_scan()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, OpenVLAOFTActionReadout)


def _has_attr(value: Any, name: str) -> bool:
    try:
        return hasattr(value, name)
    except Exception:  # noqa: BLE001  (any error of a foreign attribute hook means: not a kernel holder)
        return False


def _instance_dict(value: Any) -> dict:
    found = vars(value)
    return found if isinstance(found, dict) else {}


def _guard_kernel_scan() -> None:
    """At engine start on CPU, vLLM looks for Triton kernel holders in every attribute of every
    loaded module: `hasattr(value, "__dict__")`, then `vars(value).get("kernel")`
    (triton_utils/dispatcher.py, `_rebind_kernels`). Objects of other libraries break that once
    they are loaded in the process, as in a test session or next to a simulator: llvmlite's
    `ffi.lib` (numba) answers `__dict__` with a function wrapper, so `.get` raises AttributeError,
    and a lazy-import placeholder raises ModuleNotFoundError from `hasattr` (manifold3d). Neither
    holds a kernel. The scan's module gets a `hasattr` and a `vars` that report them as empty;
    module globals shadow the builtins for that module only."""
    from vllm.triton_utils import dispatcher

    dispatcher.hasattr = _has_attr
    dispatcher.vars = _instance_dict
