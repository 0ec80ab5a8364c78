"""`embodied-rl demos`: record scripted-expert demonstrations for an experiment config, or check some.

    embodied-rl demos [CONFIG] [key=value ...] --num-demos N --out DIR [--seed-start S] [--workers W]
    embodied-rl demos [CONFIG] [key=value ...] --check DIR
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_rl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="embodied-rl demos",
        description="Record scripted-expert demonstrations in the env of an experiment config (env.train: task, "
        "cameras, image size, control mode, state) in ManiSkill's trajectory format plus a manifest; "
        "failed expert episodes are dropped and counted.",
    )
    p.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]",
                   help="experiment config and overrides, as for train (e.g. maniskill_ppo_tiny env.train=maniskill_push_cube)")
    p.add_argument("-n", "--num-demos", type=int, help="successful demonstrations to store")
    p.add_argument("-o", "--out", type=Path, help="output directory (must not exist unless --overwrite)")
    p.add_argument("--seed-start", type=int, default=0, help="first reset id (ManiSkill reset seed); ids are tried in order (default 0)")
    p.add_argument("--workers", type=int, default=None, help="simulator processes (default: the CPU count, at most --num-demos)")
    p.add_argument("--max-attempts", type=int, default=None, help="reset ids to try before giving up (default 2 x num-demos + 10)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory (only once the new one is complete)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--task", type=int, default=None, metavar="I",
                   help="when env.train is a mixture: record in its task number I (0-based), through that task's env config")
    p.add_argument("--check", type=Path, metavar="DIR", help="instead of recording: check that DIR's demos fit the config and print a summary")
    return p


def main(argv: Sequence[str]) -> int:
    from embodied_rl.cli import split_config_args
    from embodied_rl.configure import load_config

    parser = build_parser()
    ns = parser.parse_intermixed_args(list(argv))
    if ns.check is None and (ns.num_demos is None or ns.out is None):
        parser.error("--num-demos and --out are required (or --check DIR)")
    if ns.check is None:
        from embodied_rl.demos.storage import check_output_dir

        check_output_dir(ns.out, ns.overwrite)  # before minutes of work, not after
    name, overrides = split_config_args(ns.args)
    # The demos are what an SFT config's data.train_data_paths will name: they need not exist yet.
    cfg = load_config(name, overrides, skip=("sft_data",))
    if ns.check is not None:
        if ns.task is not None:
            parser.error("--check finds the task of the demos itself; leave --task out")
        return _check(cfg, ns.check)
    return _generate(cfg, ns)


def _check(cfg, path: Path) -> int:
    from embodied_rl.demos.reader import load_demos_for

    chunks = load_demos_for(cfg, path)
    m = chunks.manifest
    print(f"{path}: {m.num_demos} {m.task_id} demos, {len(chunks)} samples of {m.num_action_chunks} actions, "
          f"state {m.state_layout}, images {m.image_size[0]}x{m.image_size[1]} ({m.cameras['main']}"
          f"{', ' + m.cameras['wrist'] if m.cameras.get('wrist') else ''}); fits the config")
    return 0


def _usable_cpus() -> int:
    """CPUs this process may run on (a container's limit, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _generate(cfg, ns: argparse.Namespace) -> int:
    from embodied_rl.demos.generate import generate_demos
    from embodied_rl.demos.sources import ProcessSource
    from embodied_rl.demos.spec import DemoSpec

    spec = DemoSpec.from_config(cfg, ns.task)
    workers = ns.workers if ns.workers is not None else max(1, min(_usable_cpus(), ns.num_demos))
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    source = ProcessSource(spec, workers, start_method=cfg.env.train.subproc.start_method)  # a section key: a mixture's tasks share it
    report = generate_demos(spec, source, ns.out, num_demos=ns.num_demos, seed_start=ns.seed_start,
                            max_attempts=ns.max_attempts, overwrite=ns.overwrite, progress=not ns.quiet)
    m = report.manifest
    steps = sum(e.length for e in m.episodes)
    print(f"wrote {m.num_demos} {m.task_id} demos ({steps} steps) to {report.path}; {m.num_failed} failed expert "
          f"episode(s) dropped of {m.num_attempted}; {report.seconds:.0f} s with {workers} worker(s) "
          f"({report.seconds_per_attempt:.2f} s per episode)", file=sys.stderr)
    return 0
