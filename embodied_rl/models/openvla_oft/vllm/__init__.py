"""vLLM rollout backend for OpenVLA-OFT (imports vLLM: load only when that backend is chosen)."""
from __future__ import annotations


def register() -> None:
    """Register the model class object (not a "module:Class" string, which vLLM inspects in a
    subprocess that takes ~10 s)."""
    from vllm import ModelRegistry

    from embodied_rl.models.openvla_oft.vllm.layout import ARCHITECTURE
    from embodied_rl.models.openvla_oft.vllm.model import OpenVLAOFTActionReadout

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, OpenVLAOFTActionReadout)
