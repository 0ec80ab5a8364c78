"""The training and evaluation loops over the worker groups.

One training step:  rollout (env ∥ rollout workers, `rollout_epoch` times)
                    -> advantages (driver, pure functions of the batch)
                    -> update (actor group, FSDP2)
                    -> weight sync (actor rank 0 -> rollout workers, trainable tensors only)
Every rollout epoch starts fresh episodes from seeded reset ids, so a checkpoint taken between
steps holds everything a resumed run needs (weights, optimizer, scheduler, RNG streams, reward
statistics): the continued run matches an uninterrupted one.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import ray

from embodied_rl.algorithms import RunningRewardStats, compute_advantages
from embodied_rl.config.loader import to_yaml
from embodied_rl.config.plan import chunk_steps_per_epoch
from embodied_rl.config.schema import RootConfig
from embodied_rl.envs.metrics import merge_metrics
from embodied_rl.runtime import checkpoint as ckpt
from embodied_rl.runtime.groups import Groups, build_groups
from embodied_rl.runtime.metrics_logger import MetricsLogger
from embodied_rl.runtime.rng import seed_everything
from embodied_rl.workers.messages import Trajectory, concat_trajectories

log = logging.getLogger(__name__)


class EmbodiedRunner:
    def __init__(self, cfg: RootConfig) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.runner.logger.log_path)
        self.run_name = cfg.runner.experiment_name
        self.global_step = 0
        self.version = 0
        self.reward_stats = RunningRewardStats() if cfg.algorithm.reward_norm == "running" else None
        self.groups: Groups | None = None

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        cfg = self.cfg
        seed_everything(cfg.runner.seed)
        video_dirs = {"train": cfg.env.train.video_cfg.video_base_dir, "eval": cfg.env.eval.video_cfg.video_base_dir}
        self.groups = build_groups(cfg, with_actor=not cfg.runner.only_eval, run_name=self.run_name, video_dirs=video_dirs)
        if cfg.runner.resume_dir:
            self._resume(cfg.runner.resume_dir)
        elif cfg.runner.ckpt_path:
            self._load_weights(cfg.runner.ckpt_path)
        elif not cfg.runner.only_eval:
            # The value head (and LoRA) are initialised on the actor: rollout must act with them.
            self._sync_weights()

    def _resume(self, resume_dir: str) -> None:
        path = ckpt.resolve_resume_dir(resume_dir, self.run_dir)
        state = ckpt.load_runner_state(path)
        self.version = self.groups.actor.run("load_checkpoint", str(ckpt.actor_dir(path)))[0]
        self.global_step = state.global_step
        extra = state.extra
        if self.reward_stats is not None and "reward_stats" in extra:
            self.reward_stats.load_state_dict(extra["reward_stats"])
        self.groups.rollout.gather(self.groups.rollout.call_each("set_rng_state", [(rng,) for rng in extra["rollout_rng"]]))
        self.groups.env.gather(self.groups.env.call_each("set_state", [(st,) for st in extra["env_state"]]))
        self._sync_weights()
        log.info("resumed from %s at global step %d (weight version %d)", path, self.global_step, self.version)

    def _load_weights(self, path: str) -> None:
        """runner.ckpt_path (eval only): the trainable weights of a training checkpoint."""
        sd, version = ckpt.load_trainable_weights(path, self.run_dir)
        self.version = version
        self.groups.rollout.run("update_weights", sd, version)

    # ------------------------------------------------------------------ phases
    def rollout(self, mode: str, reset_ids: list[int] | None = None) -> tuple[Trajectory | None, dict[str, float]]:
        """One rollout epoch on env.<mode>: env workers step while rollout workers infer.

        Videos are filed under the step the metrics use: a training rollout belongs to the step
        it is collected for (global_step + 1), an evaluation to the step just finished."""
        g, steps = self.groups, chunk_steps_per_epoch(self.cfg, mode)
        video_step = self.global_step + 1 if mode == "train" else self.global_step
        env_refs = g.env.call("interact", steps, mode, global_step=video_step, checkpoint_step=self.version,
                              reset_ids=reset_ids)
        roll_refs = g.rollout.call("generate", steps, mode)
        env_out, roll_out = g.env.gather(env_refs), g.rollout.gather(roll_refs)
        metrics = _merge_env_metrics(env_out, prefix="env" if mode == "train" else "eval")
        for key in roll_out[0][1]:
            metrics[key] = max(r[1][key] for r in roll_out)  # wall time of the slowest worker
        traj = concat_trajectories([r[0] for r in roll_out]) if mode == "train" else None
        return traj, metrics

    def train_step(self) -> dict[str, float]:
        cfg, times, metrics = self.cfg, {}, {}
        t0 = time.perf_counter()
        trajs = []
        for _ in range(cfg.algorithm.rollout_epoch):
            traj, m = self.rollout("train")
            trajs.append(traj)
            for k, v in m.items():
                metrics[k] = metrics.get(k, 0.0) + v / cfg.algorithm.rollout_epoch
        times["time/rollout_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        # Rollout epochs join along the env axis (whole GRPO groups stay together).
        batch = concat_trajectories(trajs).to_batch()
        adv = compute_advantages(cfg.algorithm, batch, action_dim=cfg.actor.model.action_dim,
                                 auto_reset=cfg.env.train.auto_reset, reward_stats=self.reward_stats)
        batch.update(adv)
        metrics.update(_rollout_stats(batch))
        times["time/advantages_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        train_metrics = self.groups.actor.run("train_step", ray.put(_actor_batch(batch)))[0]
        times["time/train_s"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        self._sync_weights()
        times["time/weight_sync_s"] = time.perf_counter() - t3
        times["time/step_s"] = time.perf_counter() - t0
        env_busy = metrics.get("time/env/step_s", 0.0)
        infer = metrics.get("time/rollout/infer_s", 0.0)
        if times["time/rollout_s"] > 0:
            times["time/env_utilisation"] = env_busy / times["time/rollout_s"]
            times["time/rollout_utilisation"] = infer / times["time/rollout_s"]
        return {**metrics, **train_metrics, **times}

    def _sync_weights(self) -> None:
        results = self.groups.actor.run("get_trainable_state_dict")
        sd, version = results[0]
        self.groups.rollout.run("update_weights", sd, version)
        self.version = version

    def evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        _, metrics = self.rollout("eval", self._eval_reset_ids())
        metrics["time/eval_s"] = time.perf_counter() - t0
        return metrics

    def _eval_reset_ids(self) -> list[int] | None:
        """Evaluation states spread evenly over all initial states (LIBERO: every task), the same
        for every evaluation; None where states are unbounded (seeds): the env's seeded stream."""
        env_cfg = self.cfg.env.eval
        if not env_cfg.use_fixed_reset_state_ids:
            return None
        num_states = self.groups.env.run("num_reset_ids", "eval")[0]
        if num_states is None:
            return None
        return spread_reset_ids(num_states, env_cfg.total_num_envs, env_cfg.group_size)

    # ------------------------------------------------------------------ loops
    def train(self) -> int:
        cfg = self.cfg.runner
        with MetricsLogger(cfg.logger, self.run_dir, total_steps=cfg.max_steps, start_step=self.global_step,
                           config=_plain(self.cfg)) as logger, GracefulStop() as stop:
            while self.global_step < cfg.max_steps and not stop.requested:
                metrics = self.train_step()
                self.global_step += 1
                if cfg.val_check_interval > 0 and self.global_step % cfg.val_check_interval == 0:
                    metrics.update(self.evaluate())
                logger.log(self.global_step, metrics)
                if cfg.save_interval > 0 and self.global_step % cfg.save_interval == 0:
                    self.save()
            if self.global_step > 0:
                self.save()
            if stop.requested:
                log.warning("stopped by Ctrl-C after global step %d; resume with runner.resume_dir=latest", self.global_step)
                return 130
        return 0

    def eval_only(self) -> int:
        with MetricsLogger(self.cfg.runner.logger, self.run_dir, total_steps=1, config=_plain(self.cfg)) as logger:
            metrics = self.evaluate()
            logger.log(self.global_step, metrics)
        return 0

    def save(self) -> Path:
        extra: dict[str, Any] = {"rollout_rng": self.groups.rollout.run("get_rng_state"),
                                 "env_state": self.groups.env.run("get_state")}
        if self.reward_stats is not None:
            extra["reward_stats"] = self.reward_stats.state_dict()
        with ckpt.checkpoint_writer(self.run_dir, self.global_step) as tmp:
            self.groups.actor.run("save_checkpoint", str(ckpt.actor_dir(tmp)))
            ckpt.write_runner_state(tmp, global_step=self.global_step, weight_version=self.version,
                                    config_yaml=to_yaml(self.cfg), extra=extra)
        path = ckpt.latest_checkpoint(self.run_dir)
        log.info("checkpoint: %s", path)
        return path

    def close(self) -> None:
        if self.groups is not None:
            for refs in (self.groups.env.call("close"), self.groups.rollout.call("close")):
                try:
                    self.groups.env.gather(refs, timeout=120)
                except Exception as err:  # shutting down: report, keep releasing the rest
                    log.warning("worker close failed: %s", err)
            self.groups.shutdown()
            self.groups = None


ACTOR_KEYS = ("forward_inputs", "action_tokens", "logprobs", "advantages", "loss_mask", "returns", "value_mask",
              "ref_logprobs")


def _actor_batch(batch: dict) -> dict:
    """What the actor trains on (workers/actor_batch.py): T rows of values, not the T+1 bootstrap row."""
    out = {k: batch[k] for k in ACTOR_KEYS if k in batch}
    if "values" in batch:
        out["values"] = batch["values"][:-1]
    return out


class GracefulStop:
    """First Ctrl-C: finish the running step, save a checkpoint, exit 130 (a step stopped halfway
    would leave the actor's weights and the driver's step count out of step). Second: abort now."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: finishing this training step, then saving a checkpoint (press again to abort)")

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def spread_reset_ids(num_states: int, num_envs: int, group_size: int = 1) -> list[int]:
    """Reset id per sub-env: groups of `group_size` share one, groups spaced evenly over [0, num_states).

    With LIBERO's r = 50 * task + init_state, N groups over T tasks cover every task equally."""
    groups = num_envs // group_size
    return [(g * num_states) // groups for g in range(groups) for _ in range(group_size)]


def _merge_env_metrics(parts: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """Episode-weighted means over env workers, renamed env/* -> <prefix>/*; time/* as the slowest worker's."""
    out = {f"{prefix}/{k[4:]}": v for k, v in merge_metrics(parts, "env/").items()}
    for key in {k for p in parts for k in p if k.startswith("time/")}:
        out[key] = max(p[key] for p in parts if key in p)
    return out


def _rollout_stats(batch: dict) -> dict[str, float]:
    mask = batch["loss_mask"].float()
    denom = mask.sum().clamp_min(1.0)
    out = {
        "rollout/reward_per_step": float(batch["rewards"].float().mean()),
        "rollout/logprob_mean": float((batch["old_logprobs"] * mask).sum() / denom),
        "rollout/advantage_mean": float((batch["advantages"] * mask).sum() / denom),
        "rollout/valid_token_fraction": float(mask.mean()),
    }
    if "values" in batch:
        out["rollout/value_mean"] = float(batch["values"].float().mean())
    if "returns" in batch:
        out["rollout/return_target_mean"] = float(batch["returns"].float().mean())
    return out


def _plain(cfg: RootConfig) -> dict:
    from embodied_rl.config.loader import to_dict

    return to_dict(cfg)


__all__ = ["EmbodiedRunner"]
