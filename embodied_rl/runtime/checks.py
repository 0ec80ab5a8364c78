"""Rules of the checkpoints a run loads (runner.resume_dir, runner.ckpt_path, eval --compare A B)."""
from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError, UserError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _checkpoints(cfg: RootConfig) -> None:
    r = cfg.runner
    if r.ckpt_path and not r.only_eval:
        raise ConfigError("runner.ckpt_path loads weights for evaluation only; to continue training use runner.resume_dir")
    if r.resume_dir and r.only_eval:
        raise ConfigError("runner.resume_dir continues training; to evaluate a checkpoint use runner.ckpt_path")
    for key, value in (("runner.resume_dir", r.resume_dir), ("runner.ckpt_path", r.ckpt_path)):
        if value:
            from embodied_rl.runtime.checkpoint import resolve_resume_dir

            try:
                ckpt = resolve_resume_dir(value, r.logger.log_path, key=key)
            except UserError as err:
                raise ConfigError(str(err)) from None
            check_checkpoint_layout(cfg, ckpt, f"{key}={value}")


#: actor.model keys that decide which trainable tensors a checkpoint holds.
_LAYOUT_KEYS = ("add_value_head", "value_type", "is_lora", "lora_rank")


def check_checkpoint_layout(cfg: RootConfig, ckpt: Path, what: str) -> None:
    """A training checkpoint holds the trainable tensors of the config it was trained with; the
    config that loads it must build the same ones (a GRPO checkpoint has no value head)."""
    import yaml

    from embodied_rl.runtime.checkpoint import CONFIG

    path = Path(ckpt) / CONFIG
    saved = ((yaml.safe_load(path.read_text()) or {}).get("actor", {}).get("model", {})) if path.is_file() else {}
    m = cfg.actor.model
    # value_type and lora_rank shape tensors only where both sides have a value head / LoRA.
    ignored = {"value_type": not (m.add_value_head and saved.get("add_value_head")),
               "lora_rank": not (m.is_lora and saved.get("is_lora"))}
    for key in _LAYOUT_KEYS:
        ours = getattr(m, key)
        if key in saved and saved[key] != ours and not ignored.get(key, False):
            theirs = _yaml_value(saved[key])
            raise ConfigError(f"{what}: the checkpoint was trained with actor.model.{key}={theirs}, this config has "
                              f"{_yaml_value(ours)}; set actor.model.{key}={theirs} (or evaluate with the config it was trained with)")

def _yaml_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ---- `embodied-rl eval --compare A B` ----------------------------------------------------

COMPARE_PATHS = ("pass a model directory (config.json and weights, as `embodied-rl export` or `make-model` write it) "
                 "or a training checkpoint (checkpoints/global_step_N, or a run directory for its newest)")


def check_compare(cfg: RootConfig, paths: Collection[str]) -> list:
    """Validate `--compare A B` against the loaded config, before anything starts; returns the
    two `PolicySource`s (evaluation/compare.py). Episodes pair by initial state, so the eval
    envs must start every evaluation from the same reset ids, one episode per sub-env."""
    from embodied_rl.evaluation.compare import PolicySource
    from embodied_rl.runtime.checkpoint import (
        actor_dir,
        has_trainable_weights,
        resolve_resume_dir,
    )

    paths = list(paths)
    if len(paths) != 2:
        raise ConfigError(f"--compare takes two policies, A and B; got {len(paths)}")
    ev = cfg.env.eval
    if not ev.use_fixed_reset_state_ids:
        raise ConfigError("--compare pairs episodes by initial state: set env.eval.use_fixed_reset_state_ids=true "
                          "(then both policies start from the same reset ids)")
    if ev.auto_reset:
        raise ConfigError("--compare pairs one episode per sub-env and eval epoch: set env.eval.auto_reset=false "
                          "(with auto_reset, later episodes start whenever each policy's previous one ended)")
    if cfg.runner.ckpt_path:
        raise ConfigError(f"--compare evaluates A and B: remove runner.ckpt_path={cfg.runner.ckpt_path} (pass that checkpoint as A or B)")
    sources = []
    for label, path in zip("AB", paths):
        where = Path(path)
        if not where.is_dir():
            raise ConfigError(f"--compare {label}={path}: no such directory; {COMPARE_PATHS}")
        if (where / "config.json").is_file():
            if not any(where.glob("*.safetensors")):
                raise ConfigError(f"--compare {label}={path}: config.json but no *.safetensors weights; {COMPARE_PATHS}")
            sources.append(PolicySource(label, path, "model", str(where.resolve())))
            continue
        try:
            ckpt = resolve_resume_dir(path, path, key=f"--compare {label}")
        except UserError:
            raise ConfigError(f"--compare {label}={path}: neither a model directory (no config.json) nor a training "
                              f"checkpoint (no meta.json, no checkpoints/); {COMPARE_PATHS}") from None
        if not has_trainable_weights(actor_dir(ckpt)):
            raise ConfigError(f"--compare {label}={path}: checkpoint {ckpt} has no trainable weights under actor/; {COMPARE_PATHS}")
        check_checkpoint_layout(cfg, ckpt, f"--compare {label}={path}")
        sources.append(PolicySource(label, path, "checkpoint", str(ckpt.resolve())))
    return sources
