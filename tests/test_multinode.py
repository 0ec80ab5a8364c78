"""Runs across Ray nodes: a real cluster of two raylets on this machine (`ray.cluster_utils`),
each with its own node id, resources and object store, driven by the real CLI.

Per placement mode (collocated, disaggregated, hybrid) a 2-step PPO run with an evaluation at
the end: every rank runs on the node its slot is pinned to (placement.json, asked of the actors
themselves), and observations take shared memory where env and rollout worker share a node
and the object store where they do not (the channel's own counters in metrics.jsonl). The
disaggregated run is then resumed from its step-1 checkpoint: step 2 repeats exactly.

The raylets start without the simulator variables the CLI sets for itself, as on a node that
`ray start` brought up by hand: the env workers must set up their own process environment.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runs import read_metrics, run_cli, run_cli_failing
from tests.tiny_runs import EVAL_64, tiny_run

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

SLOTS_PER_NODE = 2
NODE_ENV_VARS = ("VK_ICD_FILENAMES", "MUJOCO_GL", "PYOPENGL_PLATFORM")

def config(address: str, slots: int, out: Path, model: Path) -> str:
    return tiny_run(out, model, {
        "cluster": {"address": address, "num_nodes": 2, "num_cpu_slots": slots,
                    "component_placement": {"actor,env,rollout": "all"}},
        "runner": {"save_interval": 1, "val_check_interval": 2, "seed": 3},
        "algorithm": {"eval_rollout_epoch": 1, "sampling_params": {"eval_scoring": ["greedy"]}},
        # 2 envs x 48 KB per message: above the inline size
        "env": {"train": {"init_params": {"camera_heights": 128, "camera_widths": 128}},
                "eval": {**EVAL_64, "total_num_envs": 2, "auto_reset": False, "ignore_terminations": True, "max_episode_steps": 8}},
    })

# mode -> (component_placement, node index of each component's ranks, env->rollout route)
MODES = {
    "collocated": ({"actor,env,rollout": "0,2"}, {"env": [0, 1], "rollout": [0, 1], "actor": [0, 1]}, "shm"),
    "disaggregated": ({"env": "0-1", "rollout": "2", "actor": "3"}, {"env": [0, 0], "rollout": [1], "actor": [1]}, "ray"),
    "hybrid": ({"env,rollout": "0-1", "actor": "2-3"}, {"env": [0, 0], "rollout": [0, 0], "actor": [1, 1]}, "shm"),
}


@pytest.fixture(scope="module")
def ray_nodes():
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.pop(k) for k in NODE_ENV_VARS if k in os.environ}
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": SLOTS_PER_NODE, "include_dashboard": False})
        cluster.add_node(num_cpus=SLOTS_PER_NODE)
        cluster.wait_for_nodes()
    finally:
        os.environ.update(saved)
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, ray_nodes) -> Path:
    root = tmp_path_factory.mktemp("multinode")
    (root / "configs").mkdir()
    (root / "configs" / "mn.yaml").write_text(config(ray_nodes.address, SLOTS_PER_NODE, root / "runs", root / "tiny-oft"))
    return root


def _train(workdir: Path, name: str, mode: str, *extra: str) -> Path:
    placement = json.dumps(MODES[mode][0])
    run_cli("train", str(workdir / "configs" / "mn.yaml"), f"runner.experiment_name={name}",
            f"cluster.component_placement={placement}", *extra, cwd=workdir)
    return workdir / "runs" / name


def _route_messages(row: dict, route: str) -> float:
    return sum(v for k, v in row.items() if k.startswith("channel/obs/") and k.endswith(f"/{route}_messages"))


@pytest.mark.parametrize("mode", list(MODES))
def test_two_step_train_and_eval_across_two_nodes(workdir: Path, mode: str):
    run = _train(workdir, mode, mode)
    facts = json.loads((run / "placement.json").read_text())
    nodes = list(dict.fromkeys(facts["slot_nodes"]))
    assert len(nodes) == 2 and facts["slot_nodes"] == [nodes[0]] * SLOTS_PER_NODE + [nodes[1]] * SLOTS_PER_NODE
    expected_nodes = MODES[mode][1]
    for component, ranks in facts["components"].items():
        assert [nodes.index(r["node"]) for r in ranks] == expected_nodes[component], (component, ranks)
        assert all(r["node"] == r["slot_node"] for r in ranks)
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2] and "eval/success_once" in metrics[2]
    route, other = MODES[mode][2], {"shm": "ray", "ray": "shm"}[MODES[mode][2]]
    for step in (1, 2):
        assert _route_messages(metrics[step], route) > 0 and _route_messages(metrics[step], other) == 0, metrics[step]
    assert (run / "checkpoints" / "global_step_00000002").is_dir()


def test_resume_across_nodes_repeats_the_step(workdir: Path):
    first = workdir / "runs" / "disaggregated"
    if not (first / "checkpoints").is_dir():
        first = _train(workdir, "disaggregated", "disaggregated")
    resumed = _train(workdir, "resumed", "disaggregated", f"runner.resume_dir={first / 'checkpoints' / 'global_step_00000001'}")
    a, b = read_metrics(first), read_metrics(resumed)
    assert sorted(b) == [2]
    learning = [k for k in a[2] if k.startswith(("train/", "env/", "rollout/"))]
    assert learning and {k: b[2][k] for k in learning} == {k: a[2][k] for k in learning}


def test_a_path_the_workers_do_not_share_is_refused_at_start(workdir: Path):
    """The raylets run in another working directory than the CLI: a relative output path names
    a different directory for the workers, which the start-up probe finds before any worker."""
    proc = run_cli_failing("train", str(workdir / "configs" / "mn.yaml"), "runner.experiment_name=relative",
                           f"cluster.component_placement={json.dumps(MODES['disaggregated'][0])}",
                           "runner.output_dir=relative_runs", cwd=workdir)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("error: runner.logger.log_path=relative_runs/relative is not "
                                                         "the same directory on node "), proc.stderr[-3000:]
    assert "give absolute paths" in lines[-1]
    assert not (workdir / "runs" / "relative").exists() and not list((workdir / "relative_runs" / "relative").glob("*.json"))


def test_nodes_alive_turns_false_when_a_node_of_the_slots_is_lost(ray_nodes):
    """A restart keeps its Ray session only while every node of the run's slots is alive
    (EmbodiedRunner._restart asks RayCluster.nodes_alive). A driver holds the slots of both nodes,
    then the second node goes away. Last in the module: the cluster has one node after it."""
    code = ("import sys, time\n"
            "from embodied_rl.distributed.worker_group import RayCluster\n"
            f"cluster = RayCluster(address={ray_nodes.address!r}, num_nodes=2, num_cpu_slots={SLOTS_PER_NODE})\n"
            "print('alive', cluster.nodes_alive(), flush=True)\n"
            "sys.stdin.readline()\n"
            "deadline = time.monotonic() + 60\n"
            "while cluster.nodes_alive() and time.monotonic() < deadline:\n"
            "    time.sleep(0.5)\n"
            "print('alive', cluster.nodes_alive(), flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().split() == ["alive", "True"]
        ray_nodes.remove_node(ray_nodes.list_all_nodes()[1])
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["alive", "False"]
    finally:
        proc.kill()
        proc.wait()
