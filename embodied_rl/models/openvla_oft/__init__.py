"""OpenVLA-OFT (parallel-decoding, discrete action tokens) as an RL policy; registers "openvla_oft"."""
from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy

__all__ = ["OpenVLAOFTPolicy"]
