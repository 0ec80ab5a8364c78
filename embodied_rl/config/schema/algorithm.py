"""Schema of `algorithm` (owned by embodied_rl/algorithms). Placeholder to be completed."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AlgorithmConfig:
    adv_type: str = field(default="gae", metadata={"help": "Advantage estimator: gae | grpo | bi_level_gae | reinforce_pp."})
