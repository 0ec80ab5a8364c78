"""`embodied-rl eval --compare A B` without simulators: pairing, counts, report, and the checks
that run before anything starts (the real runs are in tests/test_runtime_e2e.py and
tests/test_eval_compare.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rl import cli
from embodied_rl.configure import check_compare, load_config
from embodied_rl.errors import ConfigError
from embodied_rl.evaluation.compare import (
    comparison_report,
    format_report,
    pair_episodes,
    paired_result,
    paired_results,
)
from embodied_rl.evaluation.intervals import format_rate, mcnemar_exact, wilson_interval
from embodied_rl.evaluation.summary import change_record, eval_change
from embodied_rl.runtime import checkpoint as ckpt
from embodied_rl.types import EpisodeOutcome

REPO = Path(__file__).resolve().parents[1]
SFT_MODEL = REPO / "models" / "tiny-oft-push-cube-sft"


def outcome(sub_env: int, success: bool, reset_id: int | None = None, ret: float = 0.0, task: str = "PushCube-v1") -> EpisodeOutcome:
    return EpisodeOutcome(sub_env=sub_env, episode=0, reset_id=1000 + sub_env if reset_id is None else reset_id,
                          task_id=task, success_once=success, success_at_end=success, episode_return=ret,
                          episode_len=40)


def evaluation(successes: list[bool], epochs: int = 1, tasks: tuple[str, ...] = ("PushCube-v1",)) -> list[tuple[int, EpisodeOutcome]]:
    """Episodes on n sub-envs per epoch; sub-env i runs tasks[i % len(tasks)], as a mixture's sub-envs do."""
    n = len(successes) // epochs
    return [(k // n, outcome(k % n, s, task=tasks[k % n % len(tasks)])) for k, s in enumerate(successes)]


def test_pairs_by_epoch_and_sub_env_and_counts_discordant_pairs() -> None:
    a = evaluation([True, True, False, False, True, False, True, True], epochs=2)
    b = evaluation([True, False, False, True, False, False, False, True], epochs=2)
    pairs = pair_episodes(list(reversed(a)), b)  # order does not matter: keys do
    assert [(epoch, x.sub_env) for x, _, epoch in pairs] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    r = paired_result(pairs)
    assert (r.n, r.successes_a, r.successes_b, r.only_a, r.only_b) == (8, 5, 3, 3, 1)
    assert r.p_value == mcnemar_exact(3, 1) and r.difference == pytest.approx(0.25)
    same = paired_result(pair_episodes(a, a))
    assert (same.only_a, same.only_b, same.p_value) == (0, 0, 1.0)


def test_unpaired_evaluations_are_an_error() -> None:
    a = evaluation([True, False])
    with pytest.raises(ValueError, match="different episodes"):
        pair_episodes(a, a[:1])
    with pytest.raises(ValueError, match="reset id 1001 for A but 7"):
        pair_episodes(a, [a[0], (0, outcome(1, False, reset_id=7))])


def test_report_matches_its_episode_records_and_prints_both_scorings() -> None:
    from embodied_rl.evaluation.compare import PolicySource

    sources = [PolicySource("A", "runs/x", "checkpoint", "/abs/runs/x/checkpoints/global_step_00000002"),
               PolicySource("B", "models/m", "model", "/abs/models/m")]
    episodes = {"A": {"greedy": evaluation([True, True, False, False]), "sampled": evaluation([False, True, False, False])},
                "B": {"greedy": evaluation([False, True, True, False]), "sampled": evaluation([False, False, False, False])}}
    report = json.loads(json.dumps(comparison_report(sources, ["greedy", "sampled"], episodes, {"A": {}, "B": {}})))
    for scoring in ("greedy", "sampled"):
        r, recs = report["results"][scoring], report["episodes"]
        only_a = sum(e["A"][scoring]["success_once"] and not e["B"][scoring]["success_once"] for e in recs)
        only_b = sum(e["B"][scoring]["success_once"] and not e["A"][scoring]["success_once"] for e in recs)
        assert (r["only_a"], r["only_b"], r["mcnemar_p"]) == (only_a, only_b, mcnemar_exact(only_a, only_b))
        for side in ("A", "B"):
            k = sum(e[side][scoring]["success_once"] for e in recs)
            assert r[side]["successes"] == k and (r[side]["ci95_low"], r[side]["ci95_high"]) == pytest.approx(wilson_interval(k, 4))
    assert [e["reset_id"] for e in report["episodes"]] == [1000, 1001, 1002, 1003]
    lines = format_report(report)
    assert lines[0].startswith("greedy: 4 paired episodes") and "only A" in lines[3] and lines[4].startswith("sampled:")
    assert lines[1].split() == ["A", "runs/x", "0.500", "[0.150,", "0.850]", "(2/4)"]


def test_a_training_run_pairs_its_first_and_last_evaluation_by_initial_state() -> None:
    """The line a training run ends with: both evaluations' rates, then their episodes paired by
    initial state (listed in any order) with the exact McNemar test; eval_change.json holds the same."""
    before = evaluation([True, True, False, False, True, False, True, True], epochs=2)
    after = evaluation([True, False, False, True, False, False, False, True], epochs=2)
    paired = paired_results({"greedy": before}, {"greedy": list(reversed(after))}, ["greedy"])
    m0 = {"eval/greedy/success_once": 5 / 8, "eval/greedy/num_trajectories": 8.0}
    m1 = {"eval/greedy/success_once": 3 / 8, "eval/greedy/num_trajectories": 8.0}
    line = eval_change((0, m0), (20, m1), ["greedy"], paired)
    assert line == (f"eval success, greedy (95 % Wilson interval): {format_rate(5, 8)} at step 0 -> {format_rate(3, 8)} at step 20: "
                    f"-25.0 points; paired: 1 only after, 3 only before, 2 both, exact McNemar p = {mcnemar_exact(3, 1):.3g}")
    assert eval_change((0, m0), (20, m1), ["greedy"]).endswith("-25.0 points")  # unpaired: the rates alone
    record = json.loads(json.dumps(change_record((0, m0), (20, m1), ["greedy"], paired)))["results"]["greedy"]
    assert record["paired"] == {"n": 8, "only_before": 3, "only_after": 1, "both": 2, "mcnemar_p": mcnemar_exact(3, 1)}
    assert (record["before"]["successes"], record["after"]["successes"], record["difference"]) == (5, 3, -0.25)
    moved = [(e, outcome(o.sub_env, o.success_once, reset_id=o.reset_id + 1)) for e, o in after]
    with pytest.raises(ValueError, match="not paired"):  # the same slots from other initial states
        paired_results({"greedy": before}, {"greedy": moved}, ["greedy"])


def test_a_mixture_is_paired_per_task_as_well() -> None:
    """A mixture's result: the whole and each task's rates and paired counts, on the console, in
    eval_change.json and in an `eval --compare` report (a task's pairs are its own initial states)."""
    tasks = ("PickCube-v1", "PushCube-v1")  # even sub-envs pick, odd ones push
    before = evaluation([True, True, False, False, True, False, True, True], epochs=2, tasks=tasks)
    after = evaluation([True, False, False, True, False, False, False, True], epochs=2, tasks=tasks)
    r = paired_results({"greedy": before}, {"greedy": after}, ["greedy"])["greedy"]
    pick, push = r.tasks["PickCube-v1"], r.tasks["PushCube-v1"]
    assert (pick.n, pick.successes_a, pick.successes_b, pick.only_a, pick.only_b) == (4, 3, 1, 2, 0)
    assert (push.n, push.successes_a, push.successes_b, push.only_a, push.only_b) == (4, 2, 2, 1, 1)
    assert not paired_result(pair_episodes(evaluation([True, False]), evaluation([False, False]))).tasks  # one task: no breakdown

    def metrics(episodes) -> dict[str, float]:
        out = {"eval/greedy/success_once": sum(o.success_once for _, o in episodes) / 8, "eval/greedy/num_trajectories": 8.0}
        for task in tasks:
            mine = [o.success_once for _, o in episodes if o.task_id == task]
            out |= {f"eval/greedy/success_once/{task}": sum(mine) / len(mine), f"eval/greedy/num_trajectories/{task}": float(len(mine))}
        return out

    lines = eval_change((0, metrics(before)), (5, metrics(after)), ["greedy"], {"greedy": r}).splitlines()
    assert lines[0].startswith("eval success, greedy") and lines[0].endswith(f"exact McNemar p = {mcnemar_exact(3, 1):.3g}")
    assert lines[1] == (f"  PickCube-v1: {format_rate(3, 4)} at step 0 -> {format_rate(1, 4)} at step 5: -50.0 points; "
                        f"paired: 0 only after, 2 only before, 1 both, exact McNemar p = {mcnemar_exact(2, 0):.3g}")
    assert lines[2].startswith("  PushCube-v1: ") and "+0.0 points; paired: 1 only after, 1 only before, 1 both" in lines[2]
    record = json.loads(json.dumps(change_record((0, metrics(before)), (5, metrics(after)), ["greedy"], {"greedy": r})))
    task = record["results"]["greedy"]["tasks"]["PickCube-v1"]
    assert (task["before"]["successes"], task["after"]["successes"], task["difference"]) == (3, 1, -0.5)
    assert task["paired"] == {"n": 4, "only_before": 2, "only_after": 0, "both": 1, "mcnemar_p": mcnemar_exact(2, 0)}
    unpaired = change_record((0, metrics(before)), (5, metrics(after)), ["greedy"])["results"]["greedy"]["tasks"]
    assert unpaired["PushCube-v1"]["paired"] is None and unpaired["PushCube-v1"]["before"]["successes"] == 2

    from embodied_rl.evaluation.compare import PolicySource
    sources = [PolicySource("A", "a", "model", "/a"), PolicySource("B", "b", "model", "/b")]
    report = json.loads(json.dumps(comparison_report(sources, ["greedy"], {"A": {"greedy": before}, "B": {"greedy": after}},
                                                     {"A": {}, "B": {}})))
    assert report["results"]["greedy"]["tasks"]["PickCube-v1"]["only_a"] == 2
    assert format_report(report)[-2].startswith(f"  PickCube-v1: A {format_rate(3, 4)}, B {format_rate(1, 4)}; A - B: +50.0 points")


# ---- checks before anything starts ----------------------------------------------------------

def _cfg(tmp_path: Path, *overrides: str):
    return load_config("maniskill_ppo_from_sft", ["runner.only_eval=true", f"runner.output_dir={tmp_path}/runs", *overrides])


def _checkpoint(run: Path) -> Path:
    d = run / "checkpoints" / ckpt.step_dir_name(3)
    (d / "actor").mkdir(parents=True)
    (d / "actor" / ckpt.ACTOR_WEIGHTS).write_bytes(b"")
    (d / ckpt.META).write_text(json.dumps({"format": ckpt.FORMAT, "global_step": 3, "weight_version": 3}))
    return d


def test_check_compare_resolves_model_dirs_and_checkpoints(tmp_path: Path) -> None:
    step = _checkpoint(tmp_path / "run")
    a, b = check_compare(_cfg(tmp_path), [str(SFT_MODEL), str(tmp_path / "run")])
    assert (a.kind, a.resolved) == ("model", str(SFT_MODEL.resolve()))
    assert (b.label, b.kind, b.resolved) == ("B", "checkpoint", str(step.resolve()))  # a run directory: its newest


@pytest.mark.parametrize(("case", "overrides", "expected"), [
    ("missing", [], "--compare B={tmp}/missing: no such directory; pass a model directory"),
    ("empty", [], "--compare B={tmp}/empty: neither a model directory (no config.json) nor a training checkpoint"),
    ("no_weights", [], "--compare B={tmp}/no_weights: config.json but no *.safetensors weights"),
    ("incomplete", [], "--compare B={tmp}/incomplete: checkpoint "),
    ("run", ["env.eval.use_fixed_reset_state_ids=false"], "--compare pairs episodes by initial state: set env.eval.use_fixed_reset_state_ids=true"),
    ("run", ["env.eval.auto_reset=true"], "--compare pairs one episode per sub-env and eval epoch: set env.eval.auto_reset=false"),
])
def test_check_compare_refuses_with_one_line(tmp_path: Path, case: str, overrides: list[str], expected: str) -> None:
    _checkpoint(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "no_weights").mkdir()
    (tmp_path / "no_weights" / "config.json").write_text("{}")
    (_checkpoint(tmp_path / "incomplete_run") / "actor" / ckpt.ACTOR_WEIGHTS).unlink()
    (tmp_path / "incomplete").symlink_to(tmp_path / "incomplete_run" / "checkpoints" / ckpt.step_dir_name(3))
    with pytest.raises(ConfigError) as err:
        check_compare(_cfg(tmp_path, *overrides), [str(SFT_MODEL), str(tmp_path / case)])
    message = str(err.value)
    assert message.startswith(expected.format(tmp=tmp_path)) and "\n" not in message, message


def test_a_checkpoint_without_the_configs_value_head_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A GRPO checkpoint (no value head) under a PPO config: one line at config load, for
    --compare and for runner.ckpt_path alike, not a tensor mismatch inside a Ray worker."""
    step = _checkpoint(tmp_path / "run")
    (step / ckpt.CONFIG).write_text("actor:\n  model:\n    add_value_head: false\n    is_lora: false\n    lora_rank: 8\n")
    expected = "the checkpoint was trained with actor.model.add_value_head=false, this config has true; set actor.model.add_value_head=false"
    with pytest.raises(ConfigError, match=expected):
        check_compare(_cfg(tmp_path), [str(SFT_MODEL), str(tmp_path / "run")])
    with pytest.raises(ConfigError, match=f"runner.ckpt_path={tmp_path / 'run'}: " + expected):
        _cfg(tmp_path, f"runner.ckpt_path={tmp_path / 'run'}")
    # lora_rank shapes no tensor without LoRA on both sides
    (step / ckpt.CONFIG).write_text("actor:\n  model:\n    add_value_head: true\n    is_lora: false\n    lora_rank: 8\n")
    check_compare(_cfg(tmp_path), [str(SFT_MODEL), str(tmp_path / "run")])


def test_check_compare_refuses_ckpt_path(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "run")
    with pytest.raises(ConfigError, match="--compare evaluates A and B: remove runner.ckpt_path"):
        check_compare(_cfg(tmp_path, f"runner.ckpt_path={tmp_path / 'run'}"), [str(SFT_MODEL), str(SFT_MODEL)])


def test_compare_is_an_eval_option_and_overrides_may_follow_it() -> None:
    ns = cli.parse(["eval", "maniskill_ppo_from_sft", "--compare", "a", "b", "algorithm.eval_rollout_epoch=2"])
    assert ns.compare == ["a", "b"] and ns.args == ["maniskill_ppo_from_sft", "algorithm.eval_rollout_epoch=2"]
    with pytest.raises(SystemExit):
        cli.parse(["train", "--compare", "a", "b"])
