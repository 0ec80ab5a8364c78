"""The collector at start-up (embodied_rl/heap.py): a process starts quiet and settles once set
up; Ray's worker processes start quiet through the session's setup hook and settle when the
runtime asks them to, and the sub-env pool's fork server settles before it forks
(tests/test_subproc_preload.py checks its children).
Each case runs in a fresh interpreter: the settings are per process."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rl import heap

REPO = Path(__file__).resolve().parents[1]

_QUIET_THEN_SETTLE = """
import gc, json
from embodied_rl import heap
before = gc.get_threshold()
heap.quiet()
quiet = gc.get_threshold()
garbage = [[] for _ in range(1000)]
for g in garbage:
    g.append(g)  # cycles only a collection frees
del garbage, g
heap.settle()
print(json.dumps({"before": before, "quiet": quiet, "after": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "left": sum(isinstance(o, list) and len(o) == 1 and o[0] is o for o in gc.get_objects())}))
"""


def _python(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_quiet_raises_the_first_threshold_and_settle_collects_freezes_and_restores() -> None:
    seen = _python(_QUIET_THEN_SETTLE)
    assert seen["quiet"] == [heap.START_THRESHOLD, *seen["before"][1:]]
    assert seen["after"] == seen["before"] == list(gc.get_threshold())
    assert seen["frozen"] > 1000 and seen["left"] == 0  # the cycles were collected, not frozen


def test_a_settled_process_exits_without_leak_reports() -> None:
    """Frozen objects are collectable again at exit: triton's nanobind bindings (imported with the
    policy's transformers) report every object of theirs still alive when the process ends."""
    code = "import embodied_rl.models.openvla_oft.policy\nfrom embodied_rl import heap\nheap.settle()\nprint('{}')"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0 and "leaked" not in out.stderr, out.stderr[-2000:]


_RAY_WORKER = """
import gc, json
from embodied_rl.distributed.worker_group import RayCluster, WorkerGroup

from embodied_rl import heap

class Probe:
    def __init__(self, rank, world_size):
        self.at_init = gc.get_threshold()
    def thresholds(self):
        return self.at_init, gc.get_threshold(), gc.get_freeze_count()

cluster = RayCluster(num_cpu_slots=1)
group = WorkerGroup(Probe, cluster, cluster.placement({"env": "0"}), "env")
group.gather([w.__ray_call__.remote(heap.settle_worker) for w in group.workers], 120)  # as runtime/groups.py does
(at_init, settled, frozen), = group.thresholds().wait(120)
group.shutdown()
cluster.shutdown()
print(json.dumps({"at_init": at_init, "settled": settled, "frozen": frozen}))
"""


@pytest.mark.slow
def test_ray_workers_start_quiet_and_settle() -> None:
    seen = _python(_RAY_WORKER)
    assert seen["at_init"][0] == heap.START_THRESHOLD  # the setup hook ran before the worker's module was imported
    assert seen["settled"] == list(gc.get_threshold()) and seen["frozen"] > 0
