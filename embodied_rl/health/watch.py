"""HealthWatch: every enabled monitor of `runner.health` over each training step's metrics.

Its state (the monitors' few numbers) is saved with each checkpoint and restored on resume and
rollback, so a continued run raises the alarms an uninterrupted one would.
"""
from __future__ import annotations

import copy
from typing import Any

from embodied_rl.config.schema.health import HealthConfig
from embodied_rl.health.alarm import SEVERITY, Alarm
from embodied_rl.health.monitors import MONITORS, Metrics, Monitor


class HealthWatch:
    def __init__(self, cfg: HealthConfig) -> None:
        self.monitors: list[Monitor] = [MONITORS.get(kind)(getattr(cfg, kind), cfg.history)
                                        for kind in MONITORS.names() if getattr(cfg, kind).action != "ignore"]

    def observe(self, step: int, metrics: Metrics) -> list[Alarm]:
        """The alarms of one training step, most severe action first."""
        alarms = [a for m in self.monitors if (a := m.observe(step, metrics)) is not None]
        return sorted(alarms, key=lambda a: -SEVERITY[a.action])

    def state_dict(self) -> dict[str, Any]:
        return {m.kind: copy.deepcopy(m.state) for m in self.monitors}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for m in self.monitors:
            m.state = copy.deepcopy(state.get(m.kind, {}))


def metrics_of(alarms: list[Alarm]) -> dict[str, float]:
    """health/<kind> = 1 for each alarm of the step, and health/alarms = their count."""
    return {"health/alarms": float(len(alarms)), **{f"health/{a.kind}": 1.0 for a in alarms}}
