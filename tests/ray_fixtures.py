"""One Ray session shared by every test module that needs Ray (it takes ~2.5 s to start).

Use it with `from ray_fixtures import ray_session  # noqa: F401` and a `ray_session` argument.
Logical CPUs are 8 so several `RayCluster`s (one CPU bundle per slot) fit at once on a
2-core box; Ray's CPU counts are bookkeeping only, the OS shares the real cores.
"""
from __future__ import annotations

import pytest
import ray

import embodied_rl  # noqa: F401  (torchvision shim before anything Ray workers import)
from embodied_rl.process_env import configure_process_env

RAY_TEST_CPUS = 8


@pytest.fixture(scope="session")
def ray_session():
    configure_process_env()  # workers inherit the simulator environment from the driver
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=RAY_TEST_CPUS, include_dashboard=False, log_to_driver=True)
    yield ray
    if started:
        ray.shutdown()
