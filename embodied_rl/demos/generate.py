"""`generate_demos`: record, filter and store expert demonstrations for one experiment config."""
from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path

import numpy as np

from embodied_rl.demos.collect import collect
from embodied_rl.demos.experts import make_expert
from embodied_rl.demos.manifest import DemoError, DemoManifest, EpisodeEntry, statistics
from embodied_rl.demos.recorder import EpisodeRecord
from embodied_rl.demos.sources import EpisodeSource
from embodied_rl.demos.spec import DemoSpec
from embodied_rl.demos.storage import DemoWriter, trajectory_metadata

# state entries that no camera shows: a policy using them is given privileged information
PRIVILEGED_STATE = ("goal_x", "goal_y", "goal_z")


def default_max_attempts(num_demos: int) -> int:
    return 2 * num_demos + 10


@dataclasses.dataclass
class GenerationReport:
    manifest: DemoManifest
    path: Path
    seconds: float

    @property
    def seconds_per_attempt(self) -> float:
        return self.seconds / max(1, self.manifest.num_attempted)


def generate_demos(spec: DemoSpec, source: EpisodeSource, out: Path, *, num_demos: int, seed_start: int = 0,
                   max_attempts: int | None = None, overwrite: bool = False, progress: bool = True) -> GenerationReport:
    """Record the first `num_demos` successful expert episodes from reset ids `seed_start, +1, ...`
    with `source` and write them to `out`. Fewer successes within `max_attempts` ids is a
    DemoError and nothing is written."""
    from tqdm import tqdm

    if num_demos < 1:
        raise DemoError(f"--num-demos must be >= 1, got {num_demos}")
    max_attempts = default_max_attempts(num_demos) if max_attempts is None else max_attempts
    if max_attempts < num_demos:
        raise DemoError(f"--max-attempts={max_attempts} is below --num-demos={num_demos}")
    start = time.monotonic()
    entries: list[EpisodeEntry] = []
    actions, states = [], []
    bar = tqdm(total=num_demos, desc=f"{spec.task_id} demos", unit="demo", disable=not progress, dynamic_ncols=True)
    with DemoWriter(out, overwrite=overwrite) as writer:

        def keep(rec: EpisodeRecord) -> None:
            info = source.info
            n = writer.add(rec, info.main_camera, info.wrist_camera)
            entries.append(EpisodeEntry(episode_id=n, reset_id=rec.reset_id, length=rec.length, success=True,
                                        episode_return=float(rec.rewards.sum())))
            actions.append(rec.policy_actions)
            states.append(rec.states[:-1])  # the observations actions were taken from
            bar.update()

        failures: list[int] = []

        def drop(reset_id: int) -> None:
            failures.append(reset_id)
            bar.set_postfix(failed=len(failures))

        try:
            result = collect(source, num_demos=num_demos, seed_start=seed_start, max_attempts=max_attempts,
                             on_demo=keep, on_failure=drop)
        finally:
            bar.close()
        if len(result.kept_reset_ids) < num_demos:
            raise DemoError(
                f"{out}: only {len(result.kept_reset_ids)} of {num_demos} {spec.task_id} expert episodes succeeded "
                f"in {result.num_attempted} attempts (reset ids {seed_start}..{seed_start + result.num_attempted - 1}); "
                "nothing written; raise --max-attempts or env.train.max_episode_steps"
            )
        manifest = _manifest(spec, source, entries, result.failed_reset_ids, seed_start,
                             np.concatenate(actions), np.concatenate(states))
        trajectory_json = trajectory_metadata(
            spec.task_id, source.info.env_kwargs, spec.max_episode_steps, spec.params.control_mode,
            [(e.episode_id, e.reset_id, e.length, e.success) for e in entries],
            f"embodied_rl {manifest.generator['expert']} v{manifest.generator['expert_version']} on privileged "
            f"simulator state; actions = controller actions, policy_actions = the policy's convention",
        )
        path = writer.finish(trajectory_json, manifest.to_json())
    return GenerationReport(manifest=manifest, path=path, seconds=time.monotonic() - start)


def _manifest(spec: DemoSpec, source: EpisodeSource, entries: list[EpisodeEntry], failed: list[int],
              seed_start: int, actions: np.ndarray, states: np.ndarray) -> DemoManifest:
    from embodied_rl import __version__
    from embodied_rl.envs.action_adapter import ActionAdapter

    info = source.info
    expert = make_expert(spec.task_id)
    adapter_cfg = spec.env_cfg.action_adapter
    gripper = ActionAdapter(adapter_cfg, spec.action_dim).gripper_index
    return DemoManifest(
        task_id=spec.task_id,
        instruction=spec.instruction,
        control_mode=spec.params.control_mode,
        image_size=list(spec.image_size),
        cameras={"main": info.main_camera, "wrist": info.wrist_camera},
        state_layout=list(info.state_layout),
        privileged_state=[n for n in info.state_layout if n in PRIVILEGED_STATE],
        action_dim=spec.action_dim,
        num_action_chunks=spec.num_action_chunks,
        action_adapter=dataclasses.asdict(adapter_cfg),
        max_episode_steps=spec.max_episode_steps,
        reward_mode=spec.params.reward_mode,
        seed_start=seed_start,
        num_attempted=len(entries) + len(failed),
        failed_reset_ids=list(failed),
        episodes=entries,
        statistics=statistics(actions, states, gripper, len(entries)),
        generator={"package": "embodied_rl", "version": __version__, "expert": type(expert).__name__,
                   "expert_version": expert.version},
        env_config=dataclasses.asdict(spec.env_cfg),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
