"""`console`: a table of every evaluation and the last step, other steps at most every
CONSOLE_TABLE_S seconds (SFT runs hundreds of sub-second steps; RL steps take longer)."""
from __future__ import annotations

import math
import time

from embodied_rl.sinks import METRIC_SINKS, SinkContext

CONSOLE_TABLE_S = 10.0


@METRIC_SINKS.register("console")
class ConsoleSink:
    def __init__(self, ctx: SinkContext) -> None:
        self.write, self.total_steps = ctx.write, ctx.total_steps
        self._last_table = -math.inf

    def log(self, step: int, values: dict[str, float | None]) -> None:
        if (any(k.startswith("eval/") for k in values) or step >= self.total_steps
                or time.monotonic() - self._last_table >= CONSOLE_TABLE_S):
            self.write(format_table(step, values))
            self._last_table = time.monotonic()

    def rewind(self, step: int) -> None:
        """Lines already printed stay printed."""

    def close(self) -> None:
        """Nothing held."""


def format_table(step: int, values: dict[str, float | None]) -> str:
    width = max([len(k) for k in values] + [6])
    total = width + 17  # "| " + name + " " + 12-wide value + " |"
    lines = [f"+-- step {step} ".ljust(total - 1, "-") + "+"]
    for k, v in values.items():
        lines.append(f"| {k:<{width}} {'nan' if v is None else f'{v:.4g}':>12} |")
    lines.append("+" + "-" * (total - 2) + "+")
    return "\n".join(lines)
