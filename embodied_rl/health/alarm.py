"""An alarm: which monitor fired, on which metric, at which step, the value and the threshold."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: Severity of an alarm's action: the most severe of a step's alarms decides what the run does.
SEVERITY = {"warn": 1, "rollback": 2, "stop": 3}


@dataclass(frozen=True)
class Alarm:
    kind: str          # the monitor (a runner.health.<kind> section)
    metric: str
    step: int          # the training step whose metrics fired it
    value: float
    threshold: float
    onset: int         # first step the failure shows in: a rollback goes to a checkpoint before it
    action: str        # warn | stop | rollback (the section's action)
    above: bool = True  # fired because value > threshold (else value < threshold)
    hint: str = ""     # what usually helps, where the monitor knows
    detail: str = ""   # said instead of "metric = value > threshold" where that reads better

    def line(self) -> str:
        what = self.detail or f"{self.metric} = {self.value:.4g} {'>' if self.above else '<'} {self.threshold:.4g}"
        text = f"health: {self.kind} at step {self.step}: {what} (action: {self.action})"
        return f"{text}; {self.hint}" if self.hint else text

    def record(self) -> dict:
        return {"event": "alarm", **dataclasses.asdict(self)}
