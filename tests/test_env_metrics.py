from embodied_rl.envs.metrics import episode_metrics, merge_metrics
from embodied_rl.types import EpisodeSummary


def ep(task: str, success: bool, ret: float) -> EpisodeSummary:
    return EpisodeSummary(env_index=0, task_id=task, instruction="", reset_id=0, episode_return=ret,
                          episode_len=10, success_once=success, success_at_end=success, failed=False)


def test_per_task_means_and_episode_weighted_merge():
    a = episode_metrics([ep("t1", True, 1.0), ep("t1", False, 0.0), ep("t2", True, 2.0)])
    b = episode_metrics([ep("t2", False, 0.0)])
    assert a["success_once/t1"] == 0.5 and a["num_trajectories/t2"] == 1
    merged = merge_metrics([a, b])
    assert merged["num_trajectories"] == 4 and merged["success_once"] == 0.5
    assert merged["success_once/t2"] == 0.5 and merged["return/t2"] == 1.0
    assert merged["success_once/t1"] == 0.5 and merged["num_trajectories/t1"] == 2


def test_no_episodes_reports_a_zero_count():
    assert episode_metrics([]) == {"num_trajectories": 0.0}
    assert merge_metrics([episode_metrics([])]) == {"num_trajectories": 0.0}


def test_prefixed_merge_ignores_other_keys():
    parts = [{"env/success_once": 1.0, "env/num_trajectories": 1.0, "time/env/step_s": 3.0}]
    assert merge_metrics(parts, "env/") == {"env/success_once": 1.0, "env/num_trajectories": 1.0}


def test_eval_reset_ids_spread_over_tasks_and_share_within_groups():
    from embodied_rl.envs.reset_split import spread_reset_ids

    assert spread_reset_ids(100, 2) == [0, 50]  # LIBERO, 2 tasks x 50 init states: one env per task
    assert spread_reset_ids(500, 20) == [25 * i for i in range(20)]
    assert spread_reset_ids(100, 4, group_size=2) == [0, 0, 50, 50]


def test_a_steps_seconds_and_counts_add_up_over_its_rollout_epochs():
    from embodied_rl.runtime.worker_metrics import combine_epoch_metrics

    epochs = [{"env/success_once": 0.25, "time/env/step_s": 3.0, "time/rollout/infer_s": 1.0, "channel/obs/local_messages": 10.0},
              {"env/success_once": 0.75, "time/env/step_s": 5.0, "time/rollout/infer_s": 1.0, "channel/obs/local_messages": 10.0}]
    # Seconds add up as the step's own time/rollout_s does, so env busy / rollout time stays <= 1.
    assert combine_epoch_metrics(epochs) == {"env/success_once": 0.5, "time/env/step_s": 8.0, "time/rollout/infer_s": 2.0,
                                             "channel/obs/local_messages": 20.0}
    assert combine_epoch_metrics(epochs[:1]) == epochs[0]
