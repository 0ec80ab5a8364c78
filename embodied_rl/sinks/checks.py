"""Rule of the metric sink names: checked against the registry, so a plug-in's sink is valid."""
from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.sinks import METRIC_SINKS

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _sink_names(cfg: RootConfig) -> None:
    for name in cfg.runner.logger.logger_backends:
        METRIC_SINKS.get(name)
