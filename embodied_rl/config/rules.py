"""Cross-key rules: how a subsystem declares them and how they run.

Each subsystem that has rules keeps them beside its code in a `checks.py` with one `RuleSet`;
`embodied_rl/configure.py` lists every set, in the order they run, and is the one place that
runs them all (at `load_config`, before anything starts). Two kinds:
- `@RULES.config_check` (cfg): rules of the config alone (and of files it names);
- `@RULES.plan_check` (cfg, plan): rules that need the machine: process counts from the
  placement, the accelerator, and the sizes `config/plan.py` derived from them.
A rule raises ConfigError: one line naming the keys and the fix. Workers do not re-check;
where a worker needs the same arithmetic it calls the function a rule calls.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

Check = Callable[["RootConfig"], None]
PlanCheck = Callable[["RootConfig", "RunPlan"], None]


class RuleSet:
    """One subsystem's rules, in declaration order."""

    def __init__(self) -> None:
        self.config: list[Check] = []
        self.plan: list[PlanCheck] = []

    def config_check(self, fn: Check) -> Check:
        """Register a rule of the config alone."""
        self.config.append(fn)
        return fn

    def plan_check(self, fn: PlanCheck) -> PlanCheck:
        """Register a rule that needs the run plan (process counts, accelerator, derived sizes)."""
        self.plan.append(fn)
        return fn


def rule_name(fn: Callable) -> str:
    return fn.__name__.lstrip("_")


def run_checks(rule_sets: Sequence[RuleSet], cfg: RootConfig, skip: Collection[str] = ()) -> None:
    """Run every rule of the config alone but those named in `skip` (names without the '_'; a
    name of a plan rule is skipped by run_plan_checks)."""
    checks = [c for s in rule_sets for c in s.config]
    unknown = set(skip) - {rule_name(c) for s in rule_sets for c in (*s.config, *s.plan)}
    if unknown:
        raise ValueError(f"run_checks: no rules named {sorted(unknown)}")
    for check in checks:
        if rule_name(check) not in skip:
            check(cfg)


def run_plan_checks(rule_sets: Sequence[RuleSet], cfg: RootConfig, plan: RunPlan, skip: Collection[str] = ()) -> None:
    for s in rule_sets:
        for check in s.plan:
            if rule_name(check) not in skip:
                check(cfg, plan)
