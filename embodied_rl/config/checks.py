"""Cross-key rules run after type validation. Subsystems add theirs with `@config_check`.

A check receives the validated RootConfig and raises ConfigError (one line naming the key).
Checks that need runtime facts (world sizes, devices) belong to the runtime, not here.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

Check = Callable[["RootConfig"], None]
_CHECKS: list[Check] = []


def config_check(fn: Check) -> Check:
    """Register a cross-key check (run by load_config in registration order)."""
    _CHECKS.append(fn)
    return fn


def run_checks(cfg: RootConfig) -> None:
    for check in _CHECKS:
        check(cfg)


@config_check
def _rollout_backend(cfg: RootConfig) -> None:
    if cfg.rollout.backend == "vllm":
        raise ConfigError("rollout.backend: 'vllm' is not implemented yet; use rollout.backend=huggingface")


@config_check
def _kl_kind_the_runtime_can_feed(cfg: RootConfig) -> None:
    a = cfg.algorithm
    if (a.kl_beta > 0 or a.use_kl_loss) and a.kl_penalty == "full":
        raise ConfigError(
            "algorithm.kl_penalty: 'full' needs the full 256-bin distributions of every token, which the "
            "rollout does not store; use kl, abs, mse or low_var_kl"
        )


@config_check
def _positive(cfg: RootConfig) -> None:
    for key, value in (
        ("cluster.num_nodes", cfg.cluster.num_nodes),
        ("rollout.pipeline_stage_num", cfg.rollout.pipeline_stage_num),
        ("actor.micro_batch_size", cfg.actor.micro_batch_size),
        ("actor.global_batch_size", cfg.actor.global_batch_size),
    ):
        if value < 1:
            raise ConfigError(f"{key}: must be >= 1, got {value}")
    if not cfg.runner.only_eval and cfg.runner.max_steps < 1:
        raise ConfigError(f"runner.max_steps: must be >= 1 for training, got {cfg.runner.max_steps}")
    for key in ("val_check_interval", "save_interval"):
        value = getattr(cfg.runner, key)
        if value == 0 or value < -1:
            raise ConfigError(f"runner.{key}: must be >= 1, or -1 to disable, got {value}")
    for section in ("env", "rollout", "actor"):
        size = getattr(cfg, section).channel.queue_size
        if size < 0:
            raise ConfigError(f"{section}.channel.queue_size: must be >= 0 (0 = unbounded), got {size}")


@config_check
def _batch_sizes(cfg: RootConfig) -> None:
    if cfg.actor.global_batch_size % cfg.actor.micro_batch_size:
        raise ConfigError(
            f"actor.global_batch_size: {cfg.actor.global_batch_size} is not a multiple of "
            f"actor.micro_batch_size {cfg.actor.micro_batch_size}"
        )
    if len(set(cfg.runner.logger.logger_backends)) != len(cfg.runner.logger.logger_backends):
        raise ConfigError(f"runner.logger.logger_backends: duplicate entries in {cfg.runner.logger.logger_backends}")
