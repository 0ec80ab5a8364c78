"""embodied_rl: RL fine-tuning of vision-language-action policies in real simulators."""
from embodied_rl._compat import ensure_torchvision_importable

ensure_torchvision_importable()

__version__ = "0.1.0"
