"""Fixtures for tests that import the example plug-in (tests/plugin_example) into the test
process: its registrations must not outlive the test, since later modules enumerate every
registered simulator, policy and sink (the schema walk, the 'available: ...' errors)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

EXAMPLE_PLUGIN_DIR = Path(__file__).resolve().parent / "plugin_example"


@pytest.fixture
def registries_restored() -> Iterator[None]:
    """Whatever an `erl_*` plug-in module registers during the test is taken out afterwards;
    built-ins registered meanwhile stay (their modules are imported for good)."""
    from embodied_rl import plugins
    from embodied_rl.config.schema import model
    from embodied_rl.envs import backend
    from embodied_rl.models import registry
    from embodied_rl.sinks import METRIC_SINKS

    tables = (backend._SIMULATORS, registry._POLICIES, model._MODEL_CONFIGS, METRIC_SINKS._items)
    yield
    for table in tables:
        for name in [n for n, v in table.items() if v.__module__.startswith("erl_")]:
            del table[name]
    plugins._loaded.difference_update({m for m in plugins._loaded if m.startswith("erl_")})
    for name in [m for m in sys.modules if m.startswith("erl_")]:
        del sys.modules[name]


@pytest.fixture
def example_plugin(registries_restored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example plug-in imported into this process for one test."""
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN_DIR))
    __import__("erl_example_plugin")
