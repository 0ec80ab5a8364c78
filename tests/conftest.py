"""Shared pytest settings for the whole suite.

Fixtures shared by several test modules live in the plugin modules named in `pytest_plugins`
below, so this file stays small (it keeps `tiny_model`, the model tests' checkpoints); tests
request them by argument name and never import them.
Plain helpers are imported as `from tests.<module> import ...` (tests/ is a package).
Every test process gets the same simulator environment variables as the CLI (private Vulkan
ICD, MUJOCO_GL), set before any simulator is imported.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytest imports this file before any test module, so this is the one place that puts the
# package first: importing embodied_rl installs its import hook (embodied_rl/_compat.py), which
# must be in place before anything imports torchvision or timm.
import embodied_rl  # noqa: F401
from embodied_rl.envs.fork_server import preload_in_fork_server
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory
from embodied_rl.process_env import configure_process_env

if TYPE_CHECKING:
    import torch

pytest_plugins = ["tests.ray_fixtures", "tests.plugin_fixtures"]

configure_process_env()
# The in-process sub-env pools of the whole session fork from one server, started by whichever
# test comes first: have it import the simulator most tests run.
preload_in_fork_server([ManiSkillSubEnvFactory.__module__, *ManiSkillSubEnvFactory.preload])
# Tests never talk to the wandb service or wait on a prompt.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout under test."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_model(image_size=56, num_images=1, seed=0)`: the tiny OFT checkpoint of those
    arguments, made once per test session (per worker) and shared: a test only reads it; one
    that writes into its checkpoint directory makes its own with create_model.

    create_model seeds torch's global RNG and draws the weights from it; a later call for the
    same checkpoint puts the RNG back where that left it, so a module's tests draw the same
    numbers whether its checkpoint was made for it or earlier in the session."""
    made: dict[tuple[int, int, int], tuple[Path, torch.Tensor]] = {}

    def get(image_size: int = 56, num_images: int = 1, seed: int = 0) -> Path:
        import torch

        key = (image_size, num_images, seed)
        if key in made:
            path, rng_state = made[key]
            torch.set_rng_state(rng_state)
            return path
        from embodied_rl.models.create import create_model

        path = create_model("tiny", tmp_path_factory.mktemp("tiny_model") / f"tiny-{image_size}px-{num_images}cam-seed{seed}",
                            image_size=image_size, num_images=num_images, seed=seed).path
        made[key] = path, torch.get_rng_state()
        return path

    return get


# ------------------------------------------------------------------ parallel workers (pytest-xdist)
# `scripts/run.sh test` runs the suite in parallel workers with `--dist loadfile`: a module runs in
# one worker, so its tests share its module-scoped fixtures (a training run that several tests
# read is made once).
# The longest modules, longest first (their time in 2 workers on the 2-core box: from about 13
# minutes down to about 40 s): handed out first, so that no worker starts a long one when the
# other is nearly done.
LONGEST_MODULES = ("tests.test_benchmark_smoke", "tests.test_shipped_configs", "tests.test_sft", "tests.test_schema_walk",
                   "tests.test_runtime_e2e", "tests.test_multinode", "tests.test_learning", "tests.test_health_induced",
                   "tests.test_recovery", "tests.test_actor_fsdp", "tests.test_health_e2e", "tests.test_runtime_kl",
                   "tests.test_plugins", "tests.test_cnn_gaussian", "tests.test_leaks", "tests.test_env_shifts",
                   "tests.test_vllm_e2e", "tests.test_env_service_e2e", "tests.test_env_libero_sim",
                   "tests.test_workers_rollout", "tests.test_eval_compare", "tests.test_env_service")


def _share_the_cores() -> None:
    """In a pytest-xdist worker, torch's intra-op pool gets this worker's share of the cores: with
    every worker's pool as wide as the machine, OpenMP threads of in-process tests outnumber the
    cores and spin against each other and against the end-to-end runs' processes."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        import torch

        from embodied_rl.distributed.resources import local_cpu_count

        torch.set_num_threads(max(1, local_cpu_count() // workers))


_share_the_cores()


def _module(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    return module.__name__ if module is not None else item.nodeid.split("::")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules are handed to the workers in collection order: the longest first, then the other
    modules with slow tests, so the workers end together instead of one waiting on another's
    long tail."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {_module(item) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        module = _module(item)
        return (LONGEST_MODULES.index(module) if module in LONGEST_MODULES else len(LONGEST_MODULES), module not in slow)

    items.sort(key=rank)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test marked `serial` has the machine to itself (it pins processes to cores); the others
    share it. Around the whole protocol, so the module fixtures a test sets up or tears down are
    inside too."""
    with machine_share(exclusive=item.get_closest_marker("serial") is not None):
        return (yield)


@contextlib.contextmanager
def machine_share(exclusive: bool):
    """A writer-preferring reader/writer lock over the workers of one pytest-xdist run: a
    serial test takes the gate, so the other workers stop at their next test, then waits for
    their current one to end."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"erl-suite-{run_id}"
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
