"""Session-scoped Ray fixtures, loaded for the whole suite by `pytest_plugins` in tests/conftest.py.

A test asks for them by argument name (`ray_session`, `actor_hosts`); nothing imports them.
Ray and the actor helpers are imported inside the fixtures, so a test run that needs no Ray
does not pay for importing it.

`ray_session`: one Ray session shared by every test module that needs Ray (it takes ~2.5 s to
start). Logical CPUs are 8 so several `RayCluster`s (one CPU bundle per slot) fit at once on a
2-core box; Ray's CPU counts are bookkeeping only, the OS shares the real cores.

`actor_hosts`: two `Host` actor processes (tests/actor_fixtures.py) shared by the actor tests,
so each pays the heavy imports once per session, not once per test.
"""
from __future__ import annotations

import pytest

from embodied_rl.process_env import configure_process_env

RAY_TEST_CPUS = 8


@pytest.fixture(scope="session")
def ray_session():
    import ray

    configure_process_env()  # workers inherit the simulator environment from the driver
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=RAY_TEST_CPUS, include_dashboard=False, log_to_driver=True)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def actor_hosts(ray_session):
    import ray

    from tests.actor_fixtures import Host

    # max_restarts: a group whose test failed mid-collective is killed and comes back fresh.
    hosts = [ray.remote(num_cpus=1, max_restarts=-1)(Host).remote() for _ in range(2)]
    yield hosts
    if not ray.is_initialized():  # a later test (the schema walk) ended the shared session: gone with it
        return
    for h in hosts:
        try:
            ray.kill(h)
        except ray.exceptions.ActorHandleNotFoundError:  # its session was replaced by a later test's
            pass
