"""The training and evaluation loops over the worker groups.

One training step:  rollout (env ∥ rollout workers, `rollout_epoch` times)
                    -> advantages (every actor rank, from the rollout workers' object-store refs: pure functions of the batch)
                    -> update (actor group, FSDP2)
                    -> weight sync (actor rank 0 -> rollout workers, trainable tensors only)
Every rollout epoch starts fresh episodes from seeded reset ids, so a checkpoint taken between
steps holds everything a resumed run needs (weights, optimizer, scheduler, RNG streams, reward
statistics): the continued run matches an uninterrupted one.

What a step trains is the actor's update, chosen by runner.paradigm (workers/actor/updates/):
one that uses rollouts (rl: PPO/GRPO) gets the step above; one that holds its own data (sft:
one optimizer step on demonstration samples) trains alone, and its weights reach the rollout
workers before each evaluation. Checkpoints, resume, evaluation and logging are shared;
evaluations (during training, eval-only runs, comparisons) are in runtime/evaluations.py.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from embodied_rl.config.loader import to_dict, to_yaml
from embodied_rl.config.plan import (
    chunk_steps_per_epoch,
    components,
    evaluates_after,
    first_mode,
    may_restart,
    saves_after,
)
from embodied_rl.config.schema import RootConfig
from embodied_rl.distributed.rng import seed_everything
from embodied_rl.distributed.traffic import TRAFFIC
from embodied_rl.distributed.worker_group import WorkerError, wait_together
from embodied_rl.envs.provenance import write_environment
from embodied_rl.evaluation.summary import eval_summary
from embodied_rl.runtime import checkpoint as ckpt
from embodied_rl.runtime.evaluations import Evaluation, Evaluations
from embodied_rl.runtime.graceful_stop import GracefulStop
from embodied_rl.runtime.groups import Groups, build_groups
from embodied_rl.runtime.health_keeper import (
    HealthKeeper,
    HealthStop,
    set_aside_after,
)
from embodied_rl.runtime.metrics_logger import MetricsLogger
from embodied_rl.runtime.worker_metrics import (
    combine_epoch_metrics,
    combine_worker_metrics,
    merge_env_metrics,
)
from embodied_rl.timing import Timer
from embodied_rl.workers.actor.updates import UPDATES, Update
from embodied_rl.workers.protocol import Trajectory

log = logging.getLogger(__name__)


class EmbodiedRunner(Evaluations):
    def __init__(self, cfg: RootConfig) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.runner.logger.log_path)
        self.run_name = cfg.runner.experiment_name
        self.global_step = 0
        self.version = 0
        # What a training step trains (None: an evaluation, no actor).
        self.update: type[Update] | None = None if cfg.runner.only_eval else UPDATES.get(cfg.runner.paradigm)
        # Normalisation statistics replacing the model's: SFT's, or an eval's SFT checkpoint's.
        self.dataset_statistics: dict | None = None
        self._rollout_stale = False
        self.groups: Groups | None = None
        self.restarts = 0  # of the groups after a worker died (runner.max_restarts)
        self.health = HealthKeeper(cfg.runner, self.run_dir)
        self.saved: tuple[int, Path] | None = None  # the newest checkpoint this process wrote

    # ------------------------------------------------------------------ set-up
    def setup(self, resume_dir: str | None = None, adopt_session: bool = False, rollback: bool = False) -> None:
        """Start the groups and load the run's starting point: `resume_dir` (a checkpoint; by
        default runner.resume_dir), else runner.ckpt_path, else the model as configured.
        `adopt_session`: a restart's, see RayCluster. `rollback`: see _resume."""
        cfg = self.cfg
        resume_dir = resume_dir or cfg.runner.resume_dir
        seed_everything(cfg.runner.seed)
        video_dirs = {"train": cfg.env.train.video_cfg.video_base_dir, "eval": cfg.env.eval.video_cfg.video_base_dir}
        self.groups = build_groups(cfg, with_actor="actor" in components(cfg), run_name=self.run_name, video_dirs=video_dirs,
                                   first_mode=first_mode(cfg, resuming=bool(resume_dir)), adopt_session=adopt_session)
        write_environment(self.run_dir, self.groups.env.simulator_facts().wait())
        self.groups.record_placement(self.run_dir)
        if cfg.data.train_data_paths and not cfg.runner.only_eval:  # SFT, or RL's BC term (demos/checks.py)
            adopt = self.update.adopts_demo_statistics  # SFT's; RL's BC term keeps the policy's own
            if adopt:
                from embodied_rl.demos.sft_data import sft_statistics

                self._use_statistics(sft_statistics(cfg))
            n = self.groups.actor.load_demos(self.dataset_statistics if adopt else None).wait()[0]
            what = f"behaviour-cloning term (algorithm.bc_coef={cfg.algorithm.bc_coef:g})" if self.update.paradigm.uses_rollouts else cfg.runner.paradigm.upper()
            log.info("%s on %d demo samples from %s", what, n, ", ".join(cfg.data.train_data_paths))
        if resume_dir:
            self._resume(resume_dir, rollback=rollback)
        elif cfg.runner.ckpt_path:
            self._load_weights(cfg.runner.ckpt_path)
        elif not cfg.runner.only_eval:
            # The value head (and LoRA) are initialised on the actor: rollout must act with them.
            self._sync_weights()

    def _resume(self, resume_dir: str, rollback: bool = False) -> None:
        """Continue from a checkpoint: after a restart or on resume, or (`rollback`) after a
        health alarm, keeping the run's lowered learning rates and rollback count."""
        path = ckpt.resolve_resume_dir(resume_dir, self.run_dir)
        state = ckpt.load_runner_state(path)
        extra = state.extra
        self.health.load_state_dict(extra.get("health", {}), rollback=rollback)
        self.version = self.groups.actor.load_checkpoint(str(ckpt.actor_dir(path)), self.health.lr_scale).wait()[0]
        self.global_step = state.global_step
        if "reward_stats" in extra:
            self.groups.actor.set_reward_stats(extra["reward_stats"]).wait()
        self.groups.rollout.set_rng_state.each([(rng,) for rng in extra["rollout_rng"]]).wait()
        self.groups.env.set_state.each([(st,) for st in extra["env_state"]]).wait()
        self._sync_weights()
        log.info("resumed from %s at global step %d (weight version %d)", path, self.global_step, self.version)

    def _load_weights(self, path: str) -> None:
        """runner.ckpt_path (eval only): the trainable weights of a training checkpoint."""
        sd, version, stats = ckpt.load_trainable_weights(path, self.run_dir)
        if stats is not None:
            self._use_statistics(stats)
        self.version = version
        self.groups.rollout.update_weights(sd, version).wait()

    def _use_statistics(self, stats: dict) -> None:
        self.dataset_statistics = stats
        self.groups.rollout.set_dataset_statistics(stats).wait()

    # ------------------------------------------------------------------ phases
    def rollout(self, mode: str, reset_ids: list[int] | None = None, *, fixed_epoch: int = 0, video: bool = True,
                scoring: str = "greedy", repeat_states: bool = False
                ) -> tuple[Trajectory | None, list[dict[str, float]], dict[str, float]]:
        """One rollout epoch on env.<mode>: env workers step while rollout workers infer.

        Returns the trajectory (train only), each env worker's episode metrics and the rollout
        workers' time/* metrics. Videos are filed under the step the metrics use: a training
        rollout belongs to the step it is collected for (global_step + 1), an evaluation to the
        step just finished. Evaluation only: `scoring` names the rollout workers' sampling spec
        (greedy, sampled; a sampled one seeded by fixed_epoch), `repeat_states` starts the env
        workers' previous epoch over (another scoring of the same initial states)."""
        g, steps = self.groups, chunk_steps_per_epoch(self.cfg, mode)
        video_step = self.global_step + 1 if mode == "train" else self.global_step
        env_call = g.env.interact(steps, mode, global_step=video_step, policy_version=self.version,
                                  reset_ids=reset_ids, fixed_epoch=fixed_epoch, video=video, repeat_states=repeat_states)
        roll_call = g.rollout.generate(steps, mode, store=mode == "train", scoring=scoring, eval_epoch=fixed_epoch)
        env_out, roll_out = wait_together([env_call, roll_call])
        times = combine_worker_metrics([r[1] for r in roll_out])
        trajectories = [r[0][0] for r in roll_out] if mode == "train" else None
        return trajectories, env_out, times

    def train_step(self) -> dict[str, float]:
        cfg, timer, metrics = self.cfg, Timer(), {}
        TRAFFIC.reset()
        with timer("step"):
            trajectories = []  # per rollout epoch, references to each rollout rank's trajectory
            epochs = []
            with timer("rollout"):
                for epoch in range(cfg.algorithm.rollout_epoch):
                    # A step's video file holds one epoch: only the last is recorded (the others
                    # would be overwritten), so the rest skip rendering frames nobody reads.
                    refs, env_out, roll_times = self.rollout("train", video=epoch == cfg.algorithm.rollout_epoch - 1)
                    epochs.append({**merge_env_metrics(env_out, prefix="env"), **roll_times})
                    trajectories.append(refs)
            metrics.update(combine_epoch_metrics(epochs))
            with timer("train"):  # the actor ranks read the trajectories from the object store
                train_metrics = self.groups.actor.train_on_rollouts(trajectories).wait()[0]
            with timer("weight_sync"):
                self._sync_weights()
        times = timer.metrics("time/")
        env_busy = metrics.get("time/env/step_s", 0.0)
        infer = metrics.get("time/rollout/infer_s", 0.0)
        if times["time/rollout_s"] > 0:
            times["time/env_utilisation"] = env_busy / times["time/rollout_s"]
            times["time/rollout_utilisation"] = infer / times["time/rollout_s"]
        return {**metrics, **train_metrics, **times, **TRAFFIC.metrics()}

    def own_data_step(self) -> dict[str, float]:
        """A step of an update that holds its own data (SFT): no rollout, no weight sync."""
        timer = Timer()
        with timer("train"):
            metrics = self.groups.actor.step().wait()[0]
        self._rollout_stale = True
        metrics["time/train_s"] = metrics["time/step_s"] = timer.seconds["train"]
        return metrics

    def _sync_weights(self) -> None:
        """Actor rank 0 puts the weights in its object store, in buckets in the rollout's dtype;
        the rollout workers fetch and load them one bucket at a time (the driver passes the
        references only). With actor.enable_offload the actor's training state then leaves the
        GPU until its next training call."""
        refs, version = self.groups.actor.share_trainable_state_dict().wait()[0]
        self.groups.rollout.update_weights(refs, version).wait()
        self.version = version
        if self.cfg.actor.enable_offload:  # every sync precedes rollouts: they get the GPU memory back
            self.groups.actor.offload().wait()  # the next training call moves the state back first

    # ------------------------------------------------------------------ loops
    def train(self) -> int:
        cfg = self.cfg.runner
        with MetricsLogger(cfg.logger, self.run_dir, total_steps=cfg.max_steps, start_step=self.global_step,
                           config=to_dict(self.cfg)) as logger, GracefulStop() as stop:
            evaluations: list[Evaluation] = []
            stopped: str | None = None  # by a health alarm: the reason
            first_eval = self.global_step == 0 and evaluates_after(self.cfg, 0)
            if self.global_step == 0 and self.health.may_roll_back:
                self.save()  # the start is a checkpoint too: a failure in the first steps rolls back to it
            while not stop.requested:
                # A worker may die in any call to the groups (a step, an eval, a save), so the
                # whole body restarts: everything after the last checkpoint is recomputed.
                try:
                    if first_eval and not evaluations:
                        evaluations.append((0, *self._evaluate(episodes=self._pairs_evaluations)))
                        logger.log(0, evaluations[-1][1], counts=False)
                        self._offer_best(evaluations[-1][1])  # the start too: a run that only gets worse leaves it
                    if self.global_step >= cfg.max_steps:
                        break
                    self._advance(logger, evaluations)
                except HealthStop as err:
                    stopped = str(err)
                    self.health.stopped(self.global_step, stopped)
                    break
                except WorkerError as err:
                    if not err.died or not may_restart(self.cfg, self.restarts):
                        raise
                    self._restart(err)
                    logger.rewind(self.global_step)
                    evaluations = [e for e in evaluations if e[0] <= self.global_step]
            if len(evaluations) > 1:
                self._report_change(logger, evaluations[0], evaluations[-1])
            elif evaluations:
                logger.note(eval_summary(evaluations[0][1], self.scorings))
            if self.global_step > 0 and not (self.saved and self.saved[0] == self.global_step):
                self.save()  # stopped between checkpoints
            if self.update is not None and self.update.done_note and self.saved:
                log.info(self.update.done_note.format(checkpoint=self.saved[1]))
            if stop.requested:
                log.warning("stopped by Ctrl-C after global step %d; resume with runner.resume_dir=latest", self.global_step)
                return 130
            if stopped is not None:
                log.error("stopped at global step %d by %s; checkpoint %s (resume with runner.resume_dir=latest)",
                          self.global_step, stopped.removeprefix("health: "), self.saved[1] if self.saved else "none")
                return 1
        return 0

    def _advance(self, logger: MetricsLogger, evaluations: list[Evaluation]) -> None:
        """One global step: train, then evaluate and checkpoint when due (the last step always
        checkpoints), then act on the step's health alarms."""
        metrics = self.train_step() if self.update.paradigm.uses_rollouts else self.own_data_step()
        metrics["recovery/restarts"] = float(self.restarts)
        self.global_step += 1
        alarms = self.health.check(self.global_step, metrics)
        evaluated = evaluates_after(self.cfg, self.global_step)
        if evaluated:
            evaluations.append((self.global_step, *self._evaluate(episodes=self._pairs_evaluations)))
            metrics.update(evaluations[-1][1])
        logger.log(self.global_step, metrics)
        for alarm in alarms:
            logger.note(alarm.line())
        if saves_after(self.cfg, self.global_step) or self.global_step == self.cfg.runner.max_steps:
            self.save()
        if evaluated:
            self._offer_best(metrics)
        verdict = self.health.verdict(alarms)
        if verdict.rollback_to is not None:
            self._rollback(verdict.rollback_to, logger, evaluations)
        elif verdict.stop is not None:
            raise HealthStop(verdict.stop)

    def _offer_best(self, metrics: dict[str, float]) -> None:
        self.health.offer_best(self.run_dir, self.global_step, metrics["eval/success_once"], self._checkpoint_now)

    def _checkpoint_now(self) -> Path:
        return self.saved[1] if self.saved and self.saved[0] == self.global_step else self.save()

    def _rollback(self, path: Path, logger: MetricsLogger, evaluations: list[Evaluation]) -> None:
        """Back to checkpoint `path` with the learning rates lowered (runner.health); the steps
        after it repeat. The groups start afresh from it, exactly as a resume does, so no state of
        the abandoned steps survives in a worker. Their checkpoints move aside, so `latest` and a
        later rollback never pick one of them."""
        reached = self.global_step
        target = ckpt.load_runner_state(path, restore_rng=False).global_step
        self.health.rolled_back(reached, target)
        set_aside_after(self.run_dir, target, self.health.rollbacks)
        self._start_over(str(path), rollback=True)
        self.saved = self.global_step, path
        logger.rewind(self.global_step)
        evaluations[:] = [e for e in evaluations if e[0] <= self.global_step]
        logger.note(f"health: rolled back from step {reached} to step {self.global_step} (rollback {self.health.rollbacks} of "
                    f"{self.cfg.runner.health.max_rollbacks}); learning rates x{self.health.lr_scale:g} from here")

    def _restart(self, err: WorkerError) -> None:
        """A worker died: stop every group, start them again and resume from the last checkpoint
        (or from the start); what the lost steps did is recomputed."""
        self.restarts += 1
        latest, reached = ckpt.latest_checkpoint(self.run_dir), self.global_step
        log.warning("a worker died (%s); restart %d of %d from %s", err, self.restarts, self.cfg.runner.max_restarts,
                    latest or "the start")
        self._start_over(str(latest) if latest else None)
        log.warning("restarted at step %d: repeating %d step(s)", self.global_step, reached - self.global_step)

    def _start_over(self, resume_dir: str | None, rollback: bool = False) -> None:
        """Stop every group and start them again from `resume_dir` (None: the start)."""
        # The Ray session stays (starting one costs seconds) unless a node of the run is gone.
        cluster = self.groups.cluster
        keep = cluster.started_ray and cluster.nodes_alive()
        self.groups.shutdown(keep_session=keep)
        self.groups, self.global_step, self.version, self._rollout_stale = None, 0, 0, False
        self.setup(resume_dir=resume_dir, adopt_session=keep, rollback=rollback)

    def save(self) -> Path:
        extra: dict[str, Any] = {"rollout_rng": self.groups.rollout.get_rng_state().wait(),
                                 "env_state": self.groups.env.get_state().wait()}
        reward_stats = self.groups.actor.get_reward_stats().wait()[0] if self.groups.actor is not None else None
        if reward_stats is not None:
            extra["reward_stats"] = reward_stats
        extra["health"] = self.health.state_dict()
        with ckpt.checkpoint_writer(self.run_dir, self.global_step) as tmp:
            self.groups.actor.save_checkpoint(str(ckpt.actor_dir(tmp))).wait()
            if self.dataset_statistics is not None:
                ckpt.write_dataset_statistics(tmp, self.dataset_statistics)
            ckpt.write_runner_state(tmp, global_step=self.global_step, weight_version=self.version,
                                    config_yaml=to_yaml(self.cfg), extra=extra)
        self._record_reset_ids()
        path = ckpt.latest_checkpoint(self.run_dir)
        log.info("checkpoint: %s", path)
        self.saved = self.global_step, path
        return path

    def close(self, graceful: bool = True) -> None:
        """Stop the groups; `graceful` first lets env workers finish their videos and close
        their simulators (a failed run skips it: a worker may be blocked on a dead peer)."""
        if self.groups is not None:
            calls = (self.groups.env.close(), self.groups.rollout.close()) if graceful else ()
            for call in calls:
                try:
                    call.wait(timeout=120)
                except Exception as err:  # noqa: BLE001 - shutting down: report, keep releasing the rest
                    log.warning("worker close failed: %s", err)
            self.groups.shutdown()
            self.groups = None


__all__ = ["EmbodiedRunner"]
