"""EnvWorker (Ray actor): steps its share of the sub-envs against a rollout worker's actions.

It owns `total_num_envs / num_env_workers` sub-envs split into `pipeline_stage_num` stages,
one `ChunkedVectorEnv` per stage with seed offset `rank * stages + stage`. Train and eval
envs are separate (`env.train` / `env.eval`) and built on first use. With 2 stages the worker
steps stage k while the rollout worker infers stage k+1 (see workers/protocol.py for the
message protocol); env outputs go to the rollout worker, metrics come back from `interact`.
"""
from __future__ import annotations

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.distributed.channel import Channel
from embodied_rl.distributed.placement import envs_per_worker, rollout_rank_of
from embodied_rl.envs import ChunkedVectorEnv, make_env
from embodied_rl.envs.metrics import episode_metrics, merge_metrics
from embodied_rl.envs.provenance import distinct, simulator_facts
from embodied_rl.process_env import configure_process_env
from embodied_rl.timing import Timer
from embodied_rl.types import EpisodeOutcome, EpisodeSummary
from embodied_rl.workers.protocol import (
    ActionMessage,
    ChannelWiring,
    EnvStepMessage,
    action_key,
    obs_key,
)

MODES = ("train", "eval")


class EnvWorker:
    def __init__(
        self,
        env_cfgs: dict[str, EnvConfig],
        wiring: ChannelWiring | Channel,
        *,
        rank: int,
        world_size: int,
        num_rollout_workers: int,
        pipeline_stage_num: int,
        video_dirs: dict[str, str] | None = None,
        run_name: str = "",
    ):
        # Before any simulator loads: on a node the driver did not start, nothing set these.
        configure_process_env()
        unknown = set(env_cfgs) - set(MODES)
        if unknown:
            raise ValueError(f"EnvWorker: unknown modes {sorted(unknown)}; valid: {MODES}")
        self.cfgs, self.wiring = env_cfgs, ChannelWiring.of(wiring)
        self.rank, self.world_size, self.stages = rank, world_size, pipeline_stage_num
        self.rollout_rank = rollout_rank_of(rank, world_size, num_rollout_workers)
        self.video_dirs, self.run_name = video_dirs or {}, run_name
        self.per_stage = {m: envs_per_worker(c.total_num_envs, world_size, self.stages, m) for m, c in env_cfgs.items()}
        self._envs: dict[str, list[ChunkedVectorEnv]] = {}
        self._epochs: dict[str, list[int]] = {}  # per mode and stage, kept across release()
        self._last_episodes: list[EpisodeOutcome] = []

    def _stage_envs(self, mode: str) -> list[ChunkedVectorEnv]:
        if mode not in self.cfgs:
            raise ValueError(f"EnvWorker has no {mode!r} env config; built with {sorted(self.cfgs)}")
        if mode not in self._envs:
            self._envs[mode] = [
                make_env(self.cfgs[mode], self.per_stage[mode], seed_offset=self.rank * self.stages + s,
                         video_dir=self.video_dirs.get(mode), env_worker=self.rank, stage=s)
                for s in range(self.stages)
            ]
            for env, epoch in zip(self._envs[mode], self._epochs.get(mode, [])):
                env.epoch = epoch
        return self._envs[mode]

    def build(self, mode: str) -> None:
        """Start the `mode` sub-envs (simulator processes) now rather than at the first interact."""
        self._stage_envs(mode)

    def get_state(self) -> dict[str, list[int]]:
        """What a checkpoint needs to continue the reset-id streams: the epoch of each stage.

        Each rollout epoch starts from reset(), so no simulator state outlives an epoch."""
        for mode, envs in self._envs.items():
            self._epochs[mode] = [env.epoch for env in envs]
        return {mode: list(epochs) for mode, epochs in self._epochs.items()}

    def set_state(self, state: dict[str, list[int]]) -> None:
        for mode, epochs in state.items():
            if len(epochs) != self.stages:
                raise ValueError(f"env worker {self.rank}: state has {len(epochs)} stages for mode {mode!r}, expected {self.stages}")
            self._epochs[mode] = [int(e) for e in epochs]
            for env, epoch in zip(self._envs.get(mode, []), epochs):
                env.epoch = epoch

    def reset_id_space(self, mode: str = "eval") -> list[int] | None:
        """The reset ids the `mode` envs draw from (their reset_id_split), where the initial
        states are a finite set (LIBERO); None where they are seeds (ManiSkill)."""
        return self._stage_envs(mode)[0].finite_reset_id_space()

    def used_reset_ids(self) -> dict[str, list[int]]:
        """Per mode, every reset id an episode of this worker started from."""
        return {mode: sorted(set().union(*(env.used_reset_ids for env in envs))) for mode, envs in self._envs.items()}

    def simulator_facts(self) -> dict:
        """Simulator, renderer and package versions of this process (the run's environment.json),
        and of each env server its sub-envs run in."""
        servers = [s for envs in self._envs.values() for env in envs for b in env.backends() if (s := b.served_by())]
        return simulator_facts() | ({"env_servers": distinct(servers)} if servers else {})

    def num_envs(self, mode: str = "train") -> int:
        return self.per_stage[mode] * self.stages

    def interact(
        self,
        n_chunk_steps: int,
        mode: str = "train",
        *,
        global_step: int = 0,
        policy_version: int = 0,
        reset_ids: list[int] | None = None,
        fixed_epoch: int = 0,
        video: bool = True,
        repeat_states: bool = False,
    ) -> dict[str, float]:
        """One rollout epoch: reset every stage, then T chunk steps driven by the rollout worker.

        reset_ids: for evaluation on fixed states, one id per sub-env of *all* env workers
        (length env.<mode>.total_num_envs); this worker takes its slice.
        fixed_epoch: see ChunkedVectorEnv.reset (the epoch's index within an evaluation).
        video: record this epoch (when video_cfg.save_video); an evaluation records its first.
        repeat_states: start the previous epoch of this mode over (the same initial states, the
        reset-id stream not advancing): an evaluation's second scoring.
        Returns env/* episode metrics and time/env/* (stepping vs waiting for actions); the
        episodes themselves until the next epoch from `last_episodes`.
        """
        envs = self._stage_envs(mode)
        n = self.per_stage[mode]
        for s, env in enumerate(envs):
            if reset_ids is not None:
                start = (self.rank * self.stages + s) * n
                env.set_reset_ids(reset_ids[start : start + n])
            if video:
                env.begin_video(global_step, policy_version, mode, self.run_name)
        timer = Timer("step", "wait_actions")
        for s, env in enumerate(envs):
            with timer("step"):
                obs = env.reset(fixed_epoch, repeat=repeat_states)
            self._send(EnvStepMessage(self.rank, s, 0, obs))
        for t in range(n_chunk_steps):
            for s, env in enumerate(envs):
                with timer("wait_actions"):
                    msg: ActionMessage = self.wiring.actions.get(action_key(self.wiring.action_queue, self.rank, s))
                if (msg.stage, msg.step) != (s, t):
                    raise RuntimeError(f"env worker {self.rank}: expected actions for stage {s} step {t}, got {msg.stage}/{msg.step}")
                with timer("step"):
                    res = env.chunk_step(msg.actions)
                self._send(EnvStepMessage(
                    self.rank, s, t + 1, res.obs, rewards=res.rewards, truncations=res.truncations,
                    dones=res.terminations | res.truncations, final_obs=res.final_obs,
                ))
        metrics = self._pop_metrics(envs, n)
        for env in envs:
            env.end_video()
        metrics.update(timer.metrics("time/env/"))
        metrics.update(self.wiring.obs.take_counts("obs"))
        return metrics

    def _send(self, msg: EnvStepMessage) -> None:
        self.wiring.obs.put(msg, obs_key(self.wiring.obs_queue, self.rollout_rank, msg.stage))

    def last_episodes(self) -> list[EpisodeOutcome]:
        """The episodes of this worker's last `interact` epoch, ordered by sub-env and episode."""
        return list(self._last_episodes)

    def _pop_metrics(self, envs: list[ChunkedVectorEnv], per_stage: int) -> dict[str, float]:
        """Episode-weighted means over all stages (env/* names, per task with a /<task_id> suffix);
        keeps the episodes for last_episodes()."""
        stages = [e.pop_episodes() for e in envs]
        self._last_episodes = sorted(
            (self._outcome(ep, (self.rank * self.stages + s) * per_stage + ep.env_index, k)
             for s, eps in enumerate(stages) for ep, k in _numbered(eps)),
            key=lambda o: (o.sub_env, o.episode))
        merged = merge_metrics([episode_metrics(eps) for eps in stages])
        return {f"env/{k}": v for k, v in merged.items()}

    @staticmethod
    def _outcome(ep: EpisodeSummary, sub_env: int, episode: int) -> EpisodeOutcome:
        return EpisodeOutcome(sub_env=sub_env, episode=episode, reset_id=ep.reset_id, task_id=ep.task_id,
                              success_once=ep.success_once, success_at_end=ep.success_at_end,
                              episode_return=ep.episode_return, episode_len=ep.episode_len, failed=ep.failed)

    def release(self, mode: str) -> None:
        """Close the `mode` envs (their simulator processes); they are rebuilt on next use."""
        self.get_state()  # keep the epochs: a rebuilt env continues the reset-id stream
        for env in self._envs.pop(mode, []):
            env.close()

    def close(self) -> None:
        for mode in list(self._envs):
            self.release(mode)
        self.wiring.close()


def _numbered(episodes: list[EpisodeSummary]) -> list[tuple[EpisodeSummary, int]]:
    """Each episode with its index on its sub-env (episodes are listed in the order they ended)."""
    seen: dict[int, int] = {}
    out = []
    for ep in episodes:
        out.append((ep, seen.get(ep.env_index, 0)))
        seen[ep.env_index] = seen.get(ep.env_index, 0) + 1
    return out
