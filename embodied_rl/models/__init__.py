"""Policies (one folder per architecture) behind one interface and a registry."""
from embodied_rl.models.base import BasePolicy, PolicyOutput
from embodied_rl.models.registry import build_policy, policy_class, register_policy

__all__ = ["BasePolicy", "PolicyOutput", "build_policy", "policy_class", "register_policy"]
