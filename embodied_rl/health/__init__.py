"""Training health: monitors over every step's metrics (monitors.py), the alarms they raise
(alarm.py) and the watch that runs them and carries their state through checkpoints (watch.py).
What the runner does with an alarm (warn, stop, roll back) is runtime/health_actions.py's."""
from embodied_rl.health.alarm import Alarm
from embodied_rl.health.watch import HealthWatch

__all__ = ["Alarm", "HealthWatch"]
