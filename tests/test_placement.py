"""cluster.component_placement parsing: valid layouts and one-line errors naming the key."""
from __future__ import annotations

import os

import pytest

from embodied_rl.distributed.nodes import bundle_selectors, slot_nodes
from embodied_rl.distributed.placement import parse_component_placement, parse_ranks
from embodied_rl.errors import ConfigError


@pytest.mark.parametrize(
    "text,expected",
    [("all", [0, 1, 2, 3, 4, 5, 6, 7]), ("3", [3]), (3, [3]), ("0,2,3", [0, 2, 3]), ("0-3", [0, 1, 2, 3]),
     ("0-3,5", [0, 1, 2, 3, 5]), (" 5, 0-1 ", [0, 1, 5])],
)
def test_parse_ranks(text, expected):
    assert parse_ranks(text, 8, "k") == expected


def test_collocated():
    p = parse_component_placement({"actor,env,rollout": "all"}, num_slots=2)
    for name in ("actor", "env", "rollout"):
        assert p[name].slots == (0, 1) and p[name].num_processes == 2
    assert p.occupancy(0) == 3 and p.occupancy(1) == 3


def test_disaggregated_and_hybrid_across_nodes():
    p = parse_component_placement({"actor": "0-7", "env": "0-3", "rollout": "4-7"}, num_slots=8, slots_per_node=4,
                                  accelerator="gpu")
    assert p["env"].process_slots == (0, 1, 2, 3) and p["rollout"].process_slots == (4, 5, 6, 7)
    assert p.occupancy(0) == 2 and p.occupancy(5) == 2
    assert p.node_of(5) == 1 and p.accelerator == "gpu"


def test_process_ranks_spread_evenly_over_slots():
    p = parse_component_placement({"env": "0-1:0-3", "rollout": "1", "actor": "0"}, num_slots=2)
    assert p["env"].process_slots == (0, 0, 1, 1) and p["env"].num_processes == 4
    assert p.occupancy(0) == 3 and p.occupancy(1) == 3


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"actor,critic": "all"}, "unknown component 'critic'"),
        ({"env": "0-9"}, "rank 9 out of range"),
        ({"env": "3-1"}, "bad range"),
        ({"env": "a"}, "bad rank"),
        ({"env": "0,0"}, "listed twice"),
        ({"env": "0", "env,rollout": "1"}, "placed twice"),
        ({"env": "0:1-2"}, "process ranks"),
        ({"env": "0-1:0"}, "1 processes for 2 slots"),
        ({}, "non-empty mapping"),
    ],
)
def test_invalid_placement_is_one_line_config_error(spec, needle):
    with pytest.raises(ConfigError) as err:
        parse_component_placement(spec, num_slots=4)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and "cluster.component_placement" in msg


def test_missing_component_names_the_key():
    p = parse_component_placement({"env,rollout": "all"}, num_slots=2)
    with pytest.raises(ConfigError, match="no entry for 'actor'"):
        p["actor"]


def _node(node_id: str, cpus: float, head: bool = False, alive: bool = True, address: str = "10.0.0.1") -> dict:
    resources = {"CPU": cpus, **({"node:__internal_head__": 1.0} if head else {})}
    return {"NodeID": node_id, "Alive": alive, "Resources": resources, "NodeManagerAddress": address}


def test_slots_fill_nodes_in_order_head_first():
    nodes = [_node("b", 4, address="10.0.0.2"), _node("dead", 8, alive=False), _node("a", 4, address="10.0.0.3"),
             _node("h", 2, head=True, address="10.0.0.9")]
    assert slot_nodes(nodes, num_nodes=3, slots_per_node=2, bundle={"CPU": 1.0}) == ["h", "h", "b", "b", "a", "a"]
    assert bundle_selectors(["h", "b"]) == [{"ray.io/node-id": "h"}, {"ray.io/node-id": "b"}]
    # a node too small for its share of slots is passed over, and named when nodes run out
    assert slot_nodes(nodes, num_nodes=2, slots_per_node=4, bundle={"CPU": 1.0}) == ["b"] * 4 + ["a"] * 4
    with pytest.raises(ConfigError, match=r"only 2 Ray node\(s\) have CPU=4 for 4 slot\(s\) each; too small: h \(CPU=2\)"):
        slot_nodes(nodes, num_nodes=3, slots_per_node=4, bundle={"CPU": 1.0})


# Runs in its own interpreter: a Ray session of its own with logical GPUs (Ray's bookkeeping; no
# CUDA device needed), beside whatever session the test process holds.
THREADS_PER_GPU_WORKER = """
import json, os, ray
from embodied_rl.distributed.placement import parse_component_placement
from embodied_rl.distributed.worker_group import RayCluster, WorkerGroup

class Probe:
    def __init__(self, rank, world_size):
        pass
    def threads(self):
        import torch
        return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()

ray.init(address="local", num_cpus=8, num_gpus=2, include_dashboard=False)
cluster = RayCluster()
out = {"cpus_per_slot": cluster.cpus_per_slot}
for name, spec in (("alone", {"env": "0-1"}), ("two_per_gpu", {"env": "0-1:0-3"})):
    group = WorkerGroup(Probe, cluster, cluster.placement(spec), "env")
    out[name] = [list(t) for t in group.threads().wait(120)]
    group.shutdown()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_gpu_slots_processes_get_its_share_of_the_nodes_cpus_for_their_threads() -> None:
    """8 CPUs, 2 GPUs: each GPU slot reserves 4 CPUs; a worker alone on its GPU runs torch on 4
    threads, two workers sharing a GPU on 2 each (not 1 thread per GPU worker). torch never runs
    more threads than the machine has cores."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, "-c", THREADS_PER_GPU_WORKER], capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cpus_per_slot"] == 4
    cores = os.cpu_count() or 1
    assert out["alone"] == [["4", min(4, cores)]] * 2
    assert out["two_per_gpu"] == [["2", min(2, cores)]] * 4
