"""Ray fixtures shared by the whole suite, loaded by `pytest_plugins` in tests/conftest.py.

A test asks for them by argument name (`ray_session`, `actor_hosts`); nothing imports them.
Ray and the actor helpers are imported inside the fixtures, so a test run that needs no Ray
does not pay for importing it.

`ray_session`: one Ray session shared by every test module that needs Ray (it takes ~2.5 s to
start). Logical CPUs are 8 so several `RayCluster`s (one CPU bundle per slot) fit at once on a
2-core box; Ray's CPU counts are bookkeeping only, the OS shares the real cores.

`actor_hosts`: two `Host` actor processes (tests/actor_fixtures.py) shared by the actor tests,
so each pays the heavy imports once per session, not once per test.

Both are module-scoped views of session-wide state: a module that ends the shared session (the
schema walk starts Ray clusters of its own) leaves the next module a fresh session and fresh
hosts, never handles into a session that is gone.
"""
from __future__ import annotations

from typing import Any

import pytest

from embodied_rl.process_env import configure_process_env

RAY_TEST_CPUS = 8
_SHARED: dict[str, Any] = {}  # "started": this suite began a session; "node"/"hosts": the hosts' session


def _ray_up():
    import ray

    configure_process_env()  # workers inherit the simulator environment from the driver
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=RAY_TEST_CPUS, include_dashboard=False, log_to_driver=True)
        _SHARED["started"] = True
    return ray


@pytest.fixture(scope="module")
def ray_session():
    return _ray_up()


@pytest.fixture(scope="module")
def actor_hosts(ray_session):
    ray = ray_session
    node = ray.get_runtime_context().get_node_id()
    if _SHARED.get("node") != node:  # first use, or the session the hosts lived in has ended
        from tests.actor_fixtures import Host

        # max_restarts: a group whose test failed mid-collective is killed and comes back fresh.
        _SHARED["hosts"] = [ray.remote(num_cpus=1, max_restarts=-1)(Host).remote() for _ in range(2)]
        _SHARED["node"] = node
    return _SHARED["hosts"]


@pytest.fixture(scope="session", autouse=True)
def _end_ray_session():
    yield
    if _SHARED.get("started"):
        import ray

        if ray.is_initialized():
            ray.shutdown()
