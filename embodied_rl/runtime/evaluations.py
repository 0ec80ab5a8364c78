"""The evaluation side of EmbodiedRunner: evaluations during and after training, eval-only runs
and the paired comparison of two policies (`embodied-rl eval --compare`).

An evaluation scores the policy once per `algorithm.sampling_params.eval_scoring` (greedy,
sampled), each on the same initial states: per eval epoch the scorings run back to back, the
later ones replaying the first's reset ids. Metrics: eval/<scoring>/... for each, and the first
scoring's again as eval/... . `compare` evaluates two policies with the same workers and pairs
their episodes (evaluation/compare.py); a training run pairs its first and last evaluation's
the same way when they start from the same states, for the result it prints at the end.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.loader import to_dict
from embodied_rl.envs.reset_split import spread_reset_ids
from embodied_rl.evaluation.compare import METRIC, EvalEpisodes, paired_results
from embodied_rl.evaluation.intervals import add_success_intervals
from embodied_rl.evaluation.summary import (
    EVAL_CHANGE_FILE,
    change_record,
    eval_change,
    eval_summary,
    task_mean,
)
from embodied_rl.runtime.metrics_logger import MetricsLogger
from embodied_rl.runtime.reset_ids_record import record_reset_ids
from embodied_rl.runtime.worker_metrics import (
    combine_epoch_metrics,
    combine_worker_metrics,
    merge_env_metrics,
)
from embodied_rl.timing import Timer
from embodied_rl.types import EpisodeOutcome

if TYPE_CHECKING:
    from embodied_rl.evaluation.compare import PolicySource

#: (global step, eval metrics, per scoring its episodes when they pair across evaluations)
Evaluation = tuple[int, dict[str, float], dict[str, EvalEpisodes]]

log = logging.getLogger(__name__)


class Evaluations:
    """Mixed into EmbodiedRunner, whose groups, rollout and weight loading it uses."""

    @property
    def scorings(self) -> list[str]:
        """algorithm.sampling_params.eval_scoring: the primary (logged as eval/...) first."""
        return list(self.cfg.algorithm.sampling_params.eval_scoring)

    def evaluate(self) -> dict[str, float]:
        return self._evaluate()[0]

    def _evaluate(self, episodes: bool = False) -> tuple[dict[str, float], dict[str, list[tuple[int, EpisodeOutcome]]]]:
        """Every scoring on the same initial states: (metrics, per scoring its (eval epoch, episode)
        list when `episodes`, else empty lists). Videos record the primary scoring's first epoch."""
        if self._rollout_stale:  # own-data steps (SFT) do not sync: the rollout workers get the weights when they act
            self._sync_weights()
            self._rollout_stale = False
        timer = Timer()
        with timer("eval"):
            metrics, outcomes = self._evaluate_scorings(episodes)
        metrics.update(timer.metrics("time/"))
        self._record_reset_ids()
        return metrics, outcomes

    def _evaluate_scorings(self, episodes: bool) -> tuple[dict[str, float], dict[str, list[tuple[int, EpisodeOutcome]]]]:
        epochs, scorings = self.cfg.algorithm.eval_rollout_epoch, self.scorings
        ids = self._eval_reset_ids(epochs)
        parts: dict[str, list[dict[str, float]]] = {s: [] for s in scorings}
        outcomes: dict[str, list[tuple[int, EpisodeOutcome]]] = {s: [] for s in scorings}
        times: list[dict[str, float]] = []  # per rollout: the slowest worker's seconds
        for k in range(epochs):
            for j, scoring in enumerate(scorings):
                _, env_out, roll_times = self.rollout("eval", ids[k] if ids else None, fixed_epoch=k, video=k == 0 and j == 0,
                                                      scoring=scoring, repeat_states=j > 0)
                parts[scoring] += env_out
                times.append({key: v for key, v in {**combine_worker_metrics(env_out), **roll_times}.items() if key.startswith("time/")})
                if episodes:
                    outcomes[scoring] += [(k, o) for worker in self.groups.env.last_episodes().wait() for o in worker]
        metrics: dict[str, float] = {}
        for scoring in scorings:
            named = {k: v for k, v in merge_env_metrics(parts[scoring], prefix=f"eval/{scoring}").items() if k.startswith("eval/")}
            metrics.update(add_success_intervals(named, f"eval/{scoring}"))
            if (mean := task_mean(metrics, f"eval/{scoring}")) is not None:  # a mixture: each task counts once
                metrics[f"eval/{scoring}/{METRIC}_task_mean"] = mean
        primary = f"eval/{scorings[0]}/"
        metrics.update({"eval/" + k.removeprefix(primary): v for k, v in list(metrics.items()) if k.startswith(primary)})
        metrics.update(combine_epoch_metrics(times))  # the evaluation's seconds: its rollouts' added up
        return metrics, outcomes

    def _eval_reset_ids(self, epochs: int) -> list[list[int]] | None:
        """With use_fixed_reset_state_ids, every evaluation starts from states spread evenly over
        the eval split's initial states (LIBERO: every task), one slice per eval rollout epoch. None: the env
        draws ids from its seeded stream, fresh ones per evaluation, or where states are unbounded
        (seeds) the same ones (fixed)."""
        env_cfg = self.cfg.env.eval
        if not env_cfg.use_fixed_reset_state_ids:
            return None
        space = self.groups.env.reset_id_space("eval").wait()[0]
        if space is None:
            return None
        n = env_cfg.total_num_envs
        ids = [space[i] for i in spread_reset_ids(len(space), n * epochs, env_cfg.group_size)]
        return [ids[k * n:(k + 1) * n] for k in range(epochs)]

    def _record_reset_ids(self) -> None:
        record_reset_ids(self.run_dir, self.groups.env.used_reset_ids().wait(),
                         {mode: getattr(self.cfg.env, mode).reset_id_split for mode in ("train", "eval")})

    @property
    def _pairs_evaluations(self) -> bool:
        """Whether every evaluation starts from the same initial states, one episode per sub-env
        (fixed reset ids, no auto_reset): two evaluations' episodes then pair one to one."""
        env = self.cfg.env.eval
        return env.use_fixed_reset_state_ids and not env.auto_reset

    def _report_change(self, logger: MetricsLogger, first: Evaluation, last: Evaluation) -> None:
        """The run's result: the first and last evaluation's success per scoring, with their episodes
        paired by initial state where they pair, on the console and in eval_change.json."""
        paired = None
        if self._pairs_evaluations:
            try:
                paired = paired_results(first[2], last[2], self.scorings)
            except ValueError as err:  # e.g. a reset-id space that changed: report the rates alone
                log.warning("the evaluations at steps %d and %d do not pair: %s", first[0], last[0], err)
        ends = (first[0], first[1]), (last[0], last[1])
        logger.note(eval_change(*ends, self.scorings, paired))
        record = change_record(*ends, self.scorings, paired)
        (self.run_dir / EVAL_CHANGE_FILE).write_text(json.dumps(record, indent=1) + "\n")

    def eval_only(self) -> int:
        with MetricsLogger(self.cfg.runner.logger, self.run_dir, total_steps=1, config=to_dict(self.cfg)) as logger:
            metrics = self.evaluate()
            logger.log(self.global_step, metrics)
            logger.note(eval_summary(metrics, self.scorings))
        return 0

    def compare(self, sources: list[PolicySource]) -> int:
        """`embodied-rl eval --compare A B`: evaluate each PolicySource (evaluation/compare.py) with
        the same workers, on the same initial states, and write the paired comparison to
        comparison.json (and the console). The i-th policy's evaluation is filed as step i (its
        videos under <env.eval.video_cfg.video_base_dir>/step_00000i: the review page shows A at
        step 0, B at step 1)."""
        from embodied_rl.evaluation.compare import (
            COMPARISON_FILE,
            comparison_report,
            format_report,
        )

        episodes, metrics, videos = {}, {}, {}
        for i, src in enumerate(sources):
            self._use_policy(src)
            self.global_step = i
            log.info("evaluating %s: %s (%s)", src.label, src.path, src.kind)
            metrics[src.label], episodes[src.label] = self._evaluate(episodes=True)
            log.info("%s: %s", src.label, eval_summary(metrics[src.label], self.scorings))
            videos[src.label] = str(Path(self.cfg.env.eval.video_cfg.video_base_dir) / f"step_{i:06d}")
        report = comparison_report(sources, self.scorings, episodes, metrics)
        if self.cfg.env.eval.video_cfg.save_video:
            report["videos"] = videos  # each policy's primary scoring, first eval epoch
        path = self.run_dir / COMPARISON_FILE
        path.write_text(json.dumps(report, indent=1) + "\n")
        print("\n".join([*format_report(report), f"written to {path}"]), flush=True)
        return 0

    def _use_policy(self, src: PolicySource) -> None:
        """Rollout workers act with a PolicySource from now on: a model directory as it is, or a
        training checkpoint's trainable weights on the config's model (as runner.ckpt_path)."""
        base = src.resolved if src.kind == "model" else self.cfg.rollout.model.model_path
        self.groups.rollout.load_policy(base).wait()
        self.version, self.dataset_statistics = 0, None
        if src.kind == "checkpoint":
            self._load_weights(src.resolved)

