"""OpenVLA-OFT (parallel-decoding, discrete action tokens) as an RL policy; its policy module
registers "openvla_oft".

The policy (torch, transformers, peft) is imported on first use, not with the package: the config
loader imports `configuration` from here, and validating a config should not cost seconds of imports.
"""
from __future__ import annotations

from typing import Any

__all__ = ["OpenVLAOFTPolicy"]


def __getattr__(name: str) -> Any:
    if name == "OpenVLAOFTPolicy":
        from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy

        return OpenVLAOFTPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
