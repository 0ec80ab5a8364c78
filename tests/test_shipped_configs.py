"""Every experiment config in configs/ trains and evaluates as shipped.

Each runs through the real CLI in a fresh working directory (its model is created there on
first use, as on a fresh clone, or is the checkpoint shipped in models/) with no override
beyond sizes (shrink: the step count, one slot (the fewest workers), one rollout epoch of the
derived minimum of sub-envs, at most one critic-only step, episodes of two action chunks where no
check reads their length) and the run name: 2 training steps,
then `embodied-rl eval` of the checkpoint they wrote. The training runs score their evaluations
greedily only, on at most START_EVAL_EPISODES episodes (the sampled pass and
maniskill_ppo_from_sft's 16 epochs would make its 2 evaluations several times as long); the
eval-only run scores both, as shipped.
The eval-only path reads the env config and the checkpoint, never the algorithm, and each
eval-only run costs a whole start (Ray, workers, simulators): a config whose env config and
policy kind another test's eval-only run covers is listed in EVAL_ONLY_ELSEWHERE, and a config
whose own checks are about what an evaluation writes (per-task metrics, videos) evaluates
after its last training step instead (IN_RUN_EVAL_CHECKS): the same eval workers and writers.
An SFT config's demos are recorded with the command its header gives; a recording with the same
arguments earlier in the session is copied (maniskill_cnn_gaussian_sft's header records
maniskill_sft_tiny's demos, and tests/test_learning.py records the same 2 PushCube demos through
benchmarks/learning.py).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import imageio.v3 as iio
import pytest

from embodied_rl.config.loader import CONFIG_DIR, available
from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError
from tests.cli_runs import (
    ONE_SLOT,
    check_environment,
    check_eval_only,
    read_metrics,
    record_demos,
    run_cli,
    sidecars,
)

pytestmark = [pytest.mark.slow]

SHIPPED = available(CONFIG_DIR)
# The episodes per evaluation of a run that evaluates before training: enough to show that a
# shipped SFT policy succeeds on held-out states (maniskill_ppo_from_sft ships 64). A run that does
# not only shows that it evaluates: one epoch.
START_EVAL_EPISODES = 16
# Action chunks per episode where a run's episode length is not what its checks read: a rollout of
# several chunk steps, each a policy call and a multi-step env chunk, and videos of several frames.
SHORT_CHUNKS = 2
# Configs whose checks are about their two env workers (the videos of their evaluation): the
# others run on one slot (ONE_SLOT), as on a 1-core machine.
TWO_SLOTS = {"libero_grpo_tiny"}
# Configs whose eval-only run of a checkpoint, with the checks below, is another test's.
# The eval-only path reads the env config and the checkpoint; the algorithm does not act there.
EVAL_ONLY_ELSEWHERE = {"maniskill_sft_tiny": "tests/test_sft.py",
                       # the same env and goal-reading policy as maniskill_sft_pick_cube_tiny's eval-only run here
                       "maniskill_ppo_pick_cube": "maniskill_sft_pick_cube_tiny", "maniskill_grpo_pick_cube": "maniskill_sft_pick_cube_tiny",
                       # PickCube from the tiny preset: the same env config as maniskill_sft_pick_cube_tiny; the
                       # eval-only run of a PPO checkpoint with its value head is tests/test_runtime_e2e.py's
                       "maniskill_ppo_tiny": "maniskill_sft_pick_cube_tiny", "maniskill_grpo_tiny": "maniskill_sft_pick_cube_tiny",
                       # the eval-only run of a cnn_gaussian PPO checkpoint (and its export) is there
                       "maniskill_cnn_gaussian_sft": "tests/test_cnn_gaussian.py", "maniskill_cnn_gaussian_ppo": "tests/test_cnn_gaussian.py",
                       # an SFT-made PushCube policy with the PushCube env config: maniskill_sft_tiny's (tests/test_sft.py)
                       "maniskill_ppo_from_sft": "tests/test_sft.py",
                       # a mixture's per-task evaluation is maniskill_ppo_multitask_tiny's, LIBERO's libero_grpo_tiny's (in the run)
                       "libero_grpo_mixture_tiny": "maniskill_ppo_multitask_tiny and libero_grpo_tiny",
                       "libero_grpo_tiny": "maniskill_sft_pick_cube_tiny (its LIBERO checks: IN_RUN_EVAL_CHECKS)",
                       "maniskill_ppo_multitask_tiny": "maniskill_sft_pick_cube_tiny (its per-task checks: IN_RUN_EVAL_CHECKS)",
                       # an SFT checkpoint's eval-only run: maniskill_sft_tiny's; the mixture's per-task eval: the line above
                       "maniskill_sft_multitask_tiny": "tests/test_sft.py"}


def _two_libero_tasks(run: Path, row: dict) -> None:
    """libero_grpo_tiny on two libero_spatial tasks (real LIBERO, the tiny OFT with two cameras
    and proprio): per-task success, one sub-env per task, and per env worker a video with the
    wrist view beside the main view."""
    assert row["eval/num_trajectories"] == 2
    for task in ("libero_spatial_task0", "libero_spatial_task1"):  # one env per task (spread reset ids)
        assert row[f"eval/num_trajectories/{task}"] == 1
        assert 0.0 <= row[f"eval/success_once/{task}"] <= 1.0
    videos = sorted((run / "video" / "eval").rglob("*.mp4"))
    assert len(videos) == 2  # 2 env workers x 1 stage
    for video in videos:
        side = json.loads(video.with_suffix(".json").read_text())
        grid = side["grid"]
        assert grid["tile_width"] == 2 * grid["tile_height"]  # wrist view beside the main view
        assert {e["task_id"] for e in side["episodes"]} <= {"libero_spatial_task0", "libero_spatial_task1"}
        frames = iio.imread(video)
        assert frames.shape[0] == side["num_frames"] and frames.shape[2] == grid["cols"] * grid["tile_width"]
    assert json.loads(videos[0].with_suffix(".json").read_text())["mode"] == "eval"


def _three_maniskill_tasks(run: Path, row: dict) -> None:
    """maniskill_ppo_multitask_tiny: per-task success with intervals, the tasks' mean, and a video
    per task and stage whose episodes are that task's."""
    tasks = ("PushCube-v1", "PickCube-v1", "StackCube-v1")
    assert sum(row[f"eval/num_trajectories/{t}"] for t in tasks) == row["eval/num_trajectories"]
    for task in tasks:
        assert row[f"eval/success_once_ci95_low/{task}"] <= row[f"eval/success_once/{task}"] <= row[f"eval/success_once_ci95_high/{task}"]
    assert row["eval/success_once_task_mean"] == pytest.approx(sum(row[f"eval/success_once/{t}"] for t in tasks) / 3)
    for video in (run / "video" / "eval").rglob("*.mp4"):
        task = tasks[int(video.stem.rpartition("_task")[2])]
        assert {e["task_id"] for e in json.loads(video.with_suffix(".json").read_text())["episodes"]} == {task}


# Checks of the evaluation after the last training step (run directory, its metrics row), for the
# configs that evaluate there instead of in an eval-only run.
IN_RUN_EVAL_CHECKS = {"libero_grpo_tiny": _two_libero_tasks, "maniskill_ppo_multitask_tiny": _three_maniskill_tasks}


def test_configs_are_found() -> None:
    assert {"maniskill_ppo_from_sft", "maniskill_ppo_tiny", "maniskill_grpo_tiny", "libero_grpo_tiny",
            "maniskill_sft_tiny", "maniskill_ppo_pick_cube", "maniskill_grpo_pick_cube"} <= set(SHIPPED)


def _check_start_policy(cfg, before: dict, run: Path) -> None:
    """The evaluation before the first update scores the policy the config starts from; a shipped
    SFT checkpoint must succeed on initial states its demonstrations did not use."""
    assert before["eval/num_trajectories"] >= 16, before
    manifest = Path(cfg.actor.model.model_path) / "demos_manifest.json"
    if not manifest.is_file():
        return
    demo_ids = {e["reset_id"] for e in json.loads(manifest.read_text())["episodes"]}
    eval_ids = set(json.loads((run / "reset_ids.json").read_text())["eval"]["ids"])
    assert len(eval_ids) == before["eval/num_trajectories"] and not eval_ids & demo_ids, (eval_ids, demo_ids)
    assert before["eval/success_once"] > 0.0, before


def _check_eval_change(stdout: str, run: Path, metrics: dict[int, dict]) -> None:
    """A run that evaluated before training ends with the change, its episodes paired by initial
    state (the eval env's fixed reset ids), on the console and in eval_change.json."""
    last = max(metrics)
    lines = [line for line in stdout.splitlines() if line.startswith("eval success, greedy")]
    assert len(lines) == 1 and " at step 0 -> " in lines[0] and f" at step {last}: " in lines[0], stdout[-3000:]
    assert "; paired: " in lines[0] and " only after, " in lines[0] and "exact McNemar p = " in lines[0], lines[0]
    change = json.loads((run / "eval_change.json").read_text())["results"]["greedy"]
    n = metrics[0]["eval/num_trajectories"]
    assert (change["before"]["step"], change["after"]["step"], change["paired"]["n"]) == (0, last, n)
    paired = change["paired"]
    assert paired["both"] + paired["only_after"] == round(metrics[last]["eval/success_once"] * n)
    assert paired["both"] + paired["only_before"] == round(metrics[0]["eval/success_once"] * n)


def shrink(name: str, cfg) -> list[str]:
    """2 training steps of the smallest rollout the config allows: one rollout epoch, one group per
    stage, one minibatch; a recipe's critic-only steps become one, so the second updates the policy;
    short episodes (short_episodes)."""
    slots = [] if name in TWO_SLOTS else [ONE_SLOT]
    if cfg.runner.paradigm == "sft":
        return ["runner.max_steps=2", *slots, *short_episodes(name, cfg, [])]
    groups = max(1, -(-len(cfg.env.train.tasks) // cfg.rollout.pipeline_stage_num))  # a mixture: a group per task on one worker
    small = ["runner.max_steps=2", *slots, "algorithm.rollout_epoch=1", f"env.train.groups_per_stage={groups}", "algorithm.n_minibatches=1",
             f"runner.critic_warmup={min(cfg.runner.critic_warmup, 1)}"]
    return small + short_episodes(name, cfg, small)


def short_episodes(name: str, cfg, small: list[str]) -> list[str]:
    """Episodes of SHORT_CHUNKS action chunks where their length is not what a check reads (every
    env step renders; LIBERO's cost most): every training episode but an SFT config's (its demos' length),
    and every evaluation but the one scoring a shipped start policy (_check_start_policy: its
    successes need the full horizon). Longer by whole chunks where the shipped micro-batch size
    does not divide the shorter rollout batch."""
    modes = [] if cfg.runner.paradigm == "sft" else ["train"]
    modes += [] if cfg.runner.val_before_train else ["eval"]
    chunk = cfg.actor.model.num_action_chunks
    for chunks in range(SHORT_CHUNKS, -(-cfg.env.train.max_episode_steps // chunk)):
        short = [f"env.{mode}.max_episode_steps={chunks * chunk}" for mode in modes]
        try:
            load_config(name, [*small, *short], skip=("sft_data",))
        except ConfigError as err:
            if "must be a multiple of actor.micro_batch_size" in str(err):
                continue
            raise
        return short
    return []


def demos_command(name: str, path: str) -> tuple[str, tuple[str, ...]]:
    """The config (and its --task, for a mixture) of the `embodied-rl demos CONFIG ... --out PATH`
    that the header of config `name` says records the demos at `path` (maniskill_cnn_gaussian_sft
    trains on maniskill_sft_tiny's, so the session records them once)."""
    header = (CONFIG_DIR / f"{name}.yaml").read_text()
    ((config, task),) = re.findall(rf"embodied-rl demos (\S+)(?: --task (\d+))? .*--out {re.escape(path)}\b", header)
    return config, ("--task", task) if task else ()


# A config on LIBERO carries the libero marker (its eval-only run holds the LIBERO eval checks).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.libero) if "libero" in n
                                  else n for n in SHIPPED])
def test_shipped_config_trains_two_steps_and_evaluates(name: str, tmp_path: Path) -> None:
    cfg = load_config(name, skip=("sft_data",), plan=False)
    for path in cfg.data.train_data_paths:  # SFT: first record the demos it names, as its header says
        config, args = demos_command(name, path)
        record_demos(config, 2, path, cwd=tmp_path, args=args)
    small = shrink(name, cfg)
    per_epoch = load_config(name, small, skip=("sft_data",)).env.eval.total_num_envs
    epochs = min(cfg.algorithm.eval_rollout_epoch, -(-START_EVAL_EPISODES // per_epoch) if cfg.runner.val_before_train else 1)
    last_eval = ["runner.val_check_interval=2"] if name in IN_RUN_EVAL_CHECKS else []
    proc = run_cli("train", name, *small, *last_eval, f"runner.experiment_name={name}", "algorithm.sampling_params.eval_scoring=[greedy]",
                   f"algorithm.eval_rollout_epoch={epochs}", cwd=tmp_path)
    run = tmp_path / "runs" / name
    metrics = read_metrics(run)
    assert sorted(metrics) == ([0] if cfg.runner.val_before_train else []) + [1, 2]
    if cfg.runner.val_before_train:
        _check_start_policy(cfg, metrics[0], run)
        _check_eval_change(proc.stdout, run, metrics)
    for step in (1, 2):
        losses = {k: v for k, v in metrics[step].items() if k.startswith("train/")}
        assert losses and all(math.isfinite(v) for v in losses.values()), losses
    assert (run / "checkpoints" / "global_step_00000002").is_dir()
    if cfg.runner.paradigm == "sft":  # no training rollouts; the last step is evaluated
        assert "eval/success_once" in metrics[2] and sidecars(run, "eval")["step_000002"]
    elif cfg.env.train.video_cfg.save_video:  # training videos are filed under the step their metrics carry
        train_videos = sidecars(run, "train")
        assert sorted(train_videos) == ["step_000001", "step_000002"] and all(train_videos.values())
        sidecar = json.loads(train_videos["step_000001"][0].read_text())
        assert sidecar["global_step"] == 1

    # The run records the initial states it trained and evaluated on: never the same ones.
    used = json.loads((run / "reset_ids.json").read_text())
    assert {m: u["reset_id_split"] for m, u in used.items()} == {m: m for m in used} and used["eval" if "eval" in used else "train"]["ids"]
    assert not set(used.get("train", {}).get("ids", [])) & set(used.get("eval", {}).get("ids", []))
    check_environment(run)
    if name in IN_RUN_EVAL_CHECKS:
        assert sidecars(run, "eval")["step_000002"]
        IN_RUN_EVAL_CHECKS[name](run, metrics[2])
    if name in EVAL_ONLY_ELSEWHERE:
        return

    # Eval-only on the checkpoint, at its smallest (one rollout epoch).
    run_cli("eval", name, f"runner.experiment_name={name}_eval", f"runner.ckpt_path=runs/{name}",
            "algorithm.eval_rollout_epoch=1", *[o for o in small if o.startswith(("cluster.", "env.eval."))], cwd=tmp_path)
    check_eval_only(tmp_path / "runs" / f"{name}_eval")
