"""`embodied-rl` CLI: exit codes and one-line errors (real subprocesses), and subcommand dispatch."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from embodied_rl import cli
from embodied_rl.config.schema import RootConfig
from embodied_rl.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embodied_rl.cli", *args],
        cwd=REPO, check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "runner.max_step=3"], "error: unknown key 'runner.max_step'; did you mean 'runner.max_steps'?"),
        (["eval", "maniskill_ppo_tiny", "runner.max_steps=abc"], "error: runner.max_steps: expected int, got 'abc'"),
        (["print-config", "env.train=no_such_env"], "error: env.train: unknown env config 'no_such_env'; available: "),
        (["print-config", "no_such_experiment"], "error: unknown experiment config 'no_such_experiment'"),
    ],
)
def test_user_errors_exit_2_with_one_line(args: list[str], expected: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
    assert "Traceback" not in proc.stderr


def test_print_config_prints_resolved_yaml(tmp_path: Path) -> None:
    proc = run_cli("print-config", "maniskill_ppo_tiny", f"runner.output_dir={tmp_path}", "runner.max_steps=7")
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["runner"]["max_steps"] == 7
    assert cfg["runner"]["logger"]["log_path"] == f"{tmp_path}/maniskill_ppo_tiny"
    assert cfg["env"]["train"]["env_type"] == "maniskill"


@pytest.mark.parametrize("slots", [4, 16])
def test_print_config_of_an_sft_config_before_its_demos_exist(tmp_path: Path, slots: int) -> None:
    """The config prints at any machine size with the command that records its demos; sft
    itself still refuses to start (tests/test_bad_configs.py)."""
    demos = str(tmp_path / "demos")
    proc = run_cli("print-config", "maniskill_sft_tiny", f"cluster.num_cpu_slots={slots}", f"data.train_data_paths=[{demos}]")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["data"]["train_data_paths"] == [demos]
    assert f"{demos}: no such demo directory; record them with `embodied-rl demos maniskill_sft_tiny" in proc.stderr


@pytest.fixture()
def fake_entry(monkeypatch: pytest.MonkeyPatch):
    """Record what a dispatched subcommand receives (the target modules belong to other subsystems)."""
    calls: list[tuple[str, object]] = []

    def install(module: str, func: str) -> None:
        mod = types.ModuleType(module)
        setattr(mod, func, lambda arg: calls.append((module, arg)) or 0)
        monkeypatch.setitem(sys.modules, module, mod)

    return install, calls


def test_train_and_eval_dispatch_to_runtime_with_saved_config(fake_entry, tmp_path: Path) -> None:
    install, calls = fake_entry
    install("embodied_rl.runtime.train", "main")
    assert cli.main(["train", f"runner.output_dir={tmp_path}", "runner.max_steps=4"]) == 0
    assert cli.main(["eval", "maniskill_grpo_tiny", f"runner.output_dir={tmp_path}"]) == 0
    (_, train_cfg), (_, eval_cfg) = calls
    assert isinstance(train_cfg, RootConfig) and train_cfg.runner.max_steps == 4 and not train_cfg.runner.only_eval
    assert eval_cfg.runner.only_eval and eval_cfg.algorithm.adv_type == "grpo"
    saved = yaml.safe_load((tmp_path / "maniskill_ppo_from_sft" / "config.yaml").read_text())
    assert saved["runner"]["max_steps"] == 4  # the resolved config sits next to the run


def test_passthrough_subcommands_get_their_argv(fake_entry) -> None:
    install, calls = fake_entry
    install("embodied_rl.review.cli", "main")
    install("embodied_rl.cli.make_model", "make_model_main")
    assert cli.main(["review", "runs/a", "runs/b", "--port", "0"]) == 0
    assert cli.main(["make-model", "tiny", "/tmp/x"]) == 0
    assert calls == [("embodied_rl.review.cli", ["runs/a", "runs/b", "--port", "0"]),
                     ("embodied_rl.cli.make_model", ["tiny", "/tmp/x"])]


def test_missing_implementation_is_a_clear_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="module embodied_rl.no_such_module is missing"):
        cli.resolve_entry("embodied_rl.no_such_module:main", "feature X")
    cli.COMMANDS["_probe"] = cli.Command(
        help="", configure=lambda p: None, run=lambda ns: cli.resolve_entry("embodied_rl.cli:nope", "probe")
    )
    try:
        assert cli.main(["_probe"]) == 2
    finally:
        del cli.COMMANDS["_probe"]
    assert capsys.readouterr().err.strip() == "error: probe is not available in this installation: embodied_rl.cli has no nope()"
