"""Rules of the demonstrations: read by SFT and by demo-augmented RL (algorithm.bc_coef > 0), each
directory matching the policy and env.train."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _sft_data(cfg: RootConfig) -> None:
    """Demonstrations: read by SFT and by RL with algorithm.bc_coef > 0, each directory checked
    against the policy and env.train."""
    from embodied_rl.config.paradigms import paradigm_of

    paths, r, bc = cfg.data.train_data_paths, cfg.runner, cfg.algorithm.bc_coef
    on_demos = paradigm_of(cfg).learns_from_demos
    if on_demos and bc > 0:
        raise ConfigError(f"algorithm.bc_coef={bc} adds behaviour cloning to RL, but runner.paradigm={r.paradigm} learns from the demos "
                          "alone; set bc_coef: 0")
    if not on_demos and paths and not bc > 0:
        raise ConfigError("data.train_data_paths is read by SFT, or by RL with algorithm.bc_coef > 0; set runner.paradigm=sft "
                          "(or `embodied-rl sft`), set algorithm.bc_coef (e.g. 0.1), or remove it")
    if not on_demos and bc > 0 and not paths:
        raise ConfigError(f"algorithm.bc_coef={bc} clones demonstrations, but data.train_data_paths is empty; "
                          "list demo directories recorded by `embodied-rl demos`, or set bc_coef: 0")
    noise = cfg.data.action_noise_std
    if not 0.0 <= noise <= 0.5:
        raise ConfigError(f"data.action_noise_std={noise}: must be in [0, 0.5] of the normalised action range [-1, 1]")
    if noise > 0 and not paths:
        raise ConfigError(f"data.action_noise_std={noise} perturbs demo actions, but data.train_data_paths is empty; "
                          "set it to 0 or train on demos")
    if r.only_eval:
        return
    if on_demos and not paths:
        raise ConfigError(f"runner.paradigm={r.paradigm} needs data.train_data_paths: demo directories recorded by `embodied-rl demos`")
    if on_demos and cfg.actor.global_batch_size is None:
        raise ConfigError("actor.global_batch_size: SFT needs a number of demo samples per optimizer step (e.g. 64); null derives it from RL rollouts only")
    from embodied_rl.demos import DemoError
    from embodied_rl.demos.reader import check_demos_for

    for i, path in enumerate(paths):
        try:
            check_demos_for(cfg, path)
        except DemoError as err:
            if not Path(path).exists():
                raise MissingDemosError(f"data.train_data_paths[{i}]: {err}", str(path)) from None
            raise ConfigError(f"data.train_data_paths[{i}]: {err}") from None


class MissingDemosError(ConfigError):
    """A demo directory not recorded yet; `load_config` names the command that records it."""

    def __init__(self, problem: str, path: str, command: str = "embodied-rl demos CONFIG") -> None:
        super().__init__(f"{problem}; record them with `{command} --num-demos N --out {path}`")
        self.problem, self.path = problem, path

    def naming(self, config: str, overrides: Sequence[str]) -> MissingDemosError:
        """The same error with the experiment config and overrides it was loaded with, but the
        runner's: those never change what the demos hold (and `embodied-rl sft` adds one)."""
        kept = [o for o in overrides if not o.lstrip("+~").startswith("runner.")]
        return MissingDemosError(self.problem, self.path, " ".join(["embodied-rl demos", config, *kept]))
