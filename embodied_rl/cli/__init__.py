"""`embodied-rl`: the command-line entry point.

Subcommands live in a table (`COMMANDS`); each parses its own arguments and either runs
here (print-config) or dispatches to the module that implements it, imported lazily so
that e.g. `review` never imports torch-heavy training code. User errors print one line
`error: ...` on stderr and exit with code 2; a run that cannot go on (RunError) prints its
line and exits 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_rl import heap
from embodied_rl.errors import RunError, UserError
from embodied_rl.process_env import configure_process_env

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1


@dataclass(frozen=True)
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None]):
    """Register a subcommand: `@command("train", "…", add_config_args)` on its run function."""

    def wrap(run: Callable[[argparse.Namespace], int | None]):
        COMMANDS[name] = Command(help=help, configure=configure, run=run)
        return run

    return wrap


def resolve_entry(target: str, feature: str) -> Callable[..., Any]:
    """Import 'package.module:function'; a missing module of ours is a clear one-line error."""
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise UserError(f"{feature} is not available in this installation: module {module_name} is missing") from err
        raise UserError(f"{feature} needs the Python package '{err.name}', which is not installed; run: bash scripts/setup.sh") from err
    func = getattr(module, func_name, None)
    if func is None:
        raise UserError(f"{feature} is not available in this installation: {module_name} has no {func_name}()")
    return func


# ---- config-taking commands: train, eval, print-config -------------------------------

def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "args",
        nargs="*",
        metavar="[CONFIG] [key=value ...]",
        help="experiment name in configs/ or path to a YAML file (default: maniskill_ppo_from_sft), "
        "then overrides: key=value sets a key, +key=value adds one to a free-form section, "
        "env.train=<name> picks an env config from env_configs/",
    )


def split_config_args(args: Sequence[str], default: str | None = None) -> tuple[str, list[str]]:
    from embodied_rl.config.loader import DEFAULT_EXPERIMENT

    if args and "=" not in args[0]:
        return args[0], list(args[1:])
    return default or DEFAULT_EXPERIMENT, list(args)


def _load(ns: argparse.Namespace, extra: Sequence[str] = (), default: str | None = None, skip: Sequence[str] = (),
          resources=None):
    from embodied_rl.configure import load_config

    name, overrides = split_config_args(ns.args, default)
    return load_config(name, [*overrides, *extra], skip=skip, resources=resources)


def _claim_run_dir(cfg) -> None:
    """Make the run directory this run's own (refused if an earlier run is in it) and save the
    resolved config there: the last step before a run starts."""
    from embodied_rl.config.loader import save_resolved_config
    from embodied_rl.runtime.run_dir import check_run_dir_free

    check_run_dir_free(cfg)
    path = save_resolved_config(cfg, cfg.runner.logger.log_path)
    print(f"resolved config: {path}", file=sys.stderr)


def _train(ns: argparse.Namespace, extra: Sequence[str] = (), default: str | None = None) -> int | None:
    cfg = _load(ns, extra, default)
    main = resolve_entry("embodied_rl.runtime.train:main", "training (embodied-rl train/eval)")
    _claim_run_dir(cfg)
    return main(cfg)


@command("train", "train a policy with RL (default config: maniskill_ppo_from_sft)", add_config_args)
def train_cmd(ns: argparse.Namespace) -> int | None:
    return _train(ns)


@command("sft", "supervised fine-tuning on demonstrations (= train with runner.paradigm=sft; default config: maniskill_sft_tiny)",
         add_config_args)
def sft_cmd(ns: argparse.Namespace) -> int | None:
    return _train(ns, extra=["runner.paradigm=sft"], default="maniskill_sft_tiny")


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"),
        help="evaluate two policies on the same initial states and compare them, paired by reset id (exact McNemar "
        "test per scoring); A and B are model directories or training checkpoints; needs "
        "env.eval.use_fixed_reset_state_ids=true; writes <run dir>/comparison.json",
    )


@command("eval", "evaluate a policy without training (= train with runner.only_eval=true), or compare two: --compare A B",
         add_eval_args)
def eval_cmd(ns: argparse.Namespace) -> int | None:
    if not ns.compare:
        return _train(ns, extra=["runner.only_eval=true"])
    from embodied_rl.configure import check_compare

    cfg = _load(ns, ["runner.only_eval=true"])
    sources = check_compare(cfg, ns.compare)  # before anything starts: paths, fixed reset ids
    compare = resolve_entry("embodied_rl.runtime.train:compare_main", "comparison (embodied-rl eval --compare)")
    _claim_run_dir(cfg)
    return compare(cfg, sources)


def add_plan_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="plan for nodes of N GPUs each (cluster.num_nodes of them) instead of this machine; "
                             "give cluster.device_memory_gb for their memory")


@command("plan", "print the memory plan of a config per device, and whether it fits (same arguments as train)", add_plan_args)
def plan_cmd(ns: argparse.Namespace) -> int | None:
    from embodied_rl.config.plan import plan_run
    from embodied_rl.configure import load_config
    from embodied_rl.demos.checks import MissingDemosError
    from embodied_rl.distributed.resources import Resources, detect_resources
    from embodied_rl.errors import ConfigError
    from embodied_rl.memory.plan import check_fits, memory_plan

    resources = None
    if ns.gpus is not None:  # GPUs that are not here: their count and memory come from the command
        if ns.gpus < 1:
            raise ConfigError(f"--gpus {ns.gpus}: give the GPUs per node, >= 1")
        cluster = load_config(*split_config_args(ns.args), plan=False).cluster  # before sizes derive from the slots
        if cluster.device_memory_gb is None:
            raise ConfigError(f"--gpus {ns.gpus} plans for GPUs that are not here: give their memory with cluster.device_memory_gb=GIB")
        resources = Resources(cluster.num_nodes, ns.gpus, "gpu", source=f"--gpus {ns.gpus}")
    try:
        cfg = _load(ns, skip=("fits",), resources=resources)  # the table is printed for a config that does not fit, too
    except MissingDemosError as err:  # as print-config: demos not recorded yet do not change the plan
        cfg = _load(ns, skip=("fits", "sft_data"), resources=resources)
        print(f"note: {err}", file=sys.stderr)
    forecast = memory_plan(cfg, plan_run(cfg, resources or detect_resources(cfg.cluster)))
    print(forecast.table())
    check_fits(forecast)  # a ConfigError: one line, exit 2, as at the start of a run
    print("fits: every device's forecast is within its memory" if forecast.processes else "not checked: nothing forecast")
    return 0


@command("print-config", "print the resolved config as YAML (same arguments as train)", add_config_args)
def print_config_cmd(ns: argparse.Namespace) -> int | None:
    from embodied_rl.config.loader import to_yaml
    from embodied_rl.demos.checks import MissingDemosError
    from embodied_rl.runtime.run_dir import RunDirInUseError, check_run_dir_free

    try:
        cfg = _load(ns)
    except MissingDemosError as err:
        # Demos not recorded yet are a precondition of running, not a config error: the config
        # prints (every other rule checked) with the command that records them; sft still refuses.
        cfg = _load(ns, skip=("sft_data",))
        print(f"note: {err}", file=sys.stderr)
    try:  # likewise a run directory in use: train would refuse it, the config still prints
        check_run_dir_free(cfg)
    except RunDirInUseError as err:
        print(f"note: {err}", file=sys.stderr)
    sys.stdout.write(to_yaml(cfg))
    return 0


# ---- commands implemented by other subsystems, given their own argv ------------------

def _passthrough(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="arguments of the subcommand (see its --help)")


# name -> (help, 'module:function' given the argv after the name, what the user asked for)
_SUBSYSTEM_COMMANDS = {
    "review": ("open the review page of one or more run directories: review RUN_DIR...",
               "embodied_rl.review.cli:main", "the review page (embodied-rl review)"),
    "make-model": ("create a model checkpoint from a preset: make-model PRESET OUT_DIR",
                   "embodied_rl.cli.make_model:make_model_main", "model presets (embodied-rl make-model)"),
    "export": ("write a training checkpoint's policy as a plain model: export CHECKPOINT OUT_DIR",
               "embodied_rl.cli.export:main", "checkpoint export (embodied-rl export)"),
    "demos": ("record scripted-expert demonstrations for SFT: demos [CONFIG] [key=value ...] --num-demos N --out DIR",
              "embodied_rl.cli.demos:main", "demonstrations (embodied-rl demos)"),
    "env-server": ("serve simulators to env workers, e.g. on another host: env-server --listen HOST:PORT (key in EMBODIED_RL_ENV_SERVER_KEY)",
                   "embodied_rl.envs.service.server:main", "env servers (embodied-rl env-server)"),
}


def _subsystem_command(target: str, feature: str) -> Callable[[argparse.Namespace], int | None]:
    def run(ns: argparse.Namespace) -> int | None:
        return resolve_entry(target, feature)(ns.argv)

    return run


for _name, (_help, _target, _feature) in _SUBSYSTEM_COMMANDS.items():
    command(_name, _help, _passthrough)(_subsystem_command(_target, _feature))


# ---- entry point ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from embodied_rl import __version__

    parser = argparse.ArgumentParser(prog="embodied-rl", description="RL fine-tuning of vision-language-action policies in simulation.")
    parser.add_argument("--version", action="version", version=f"embodied-rl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        cmd.configure(sub.add_parser(name, help=cmd.help, description=cmd.help))
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse; `key=value` overrides may also follow options (eval CONFIG --compare A B k=v). A
    subsystem's command gets everything after its name as it is, options first included
    (env-server --listen HOST:PORT), which argparse's REMAINDER would not take."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _SUBSYSTEM_COMMANDS:
        return argparse.Namespace(command=args[0], argv=args[1:])
    parser = build_parser()
    ns, rest = parser.parse_known_args(args)
    if rest:
        if not hasattr(ns, "args") or any(r.startswith("-") for r in rest):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        ns.args = [*ns.args, *rest]
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    heap.quiet()  # a training run's driver settles once its workers are up (runtime/train.py)
    configure_process_env()
    ns = parse(argv)
    try:
        code = COMMANDS[ns.command].run(ns)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)

