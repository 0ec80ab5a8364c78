"""Schema of `actor.model` (owned by embodied_rl/models). Placeholder to be completed."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    model_type: str = field(default="openvla_oft", metadata={"help": "Policy architecture, a key of the model registry."})
    model_path: str = field(default="models/tiny-openvla-oft", metadata={"help": "Checkpoint directory in the official HF layout."})
