"""Which Ray node holds which resource slots.

Slot r lives on node r // slots_per_node of `ordered_nodes`: the head node first, then the
others by address and node id, so the order is the same for every run on the same cluster.
The slots' placement-group bundles are pinned to those nodes through Ray's `ray.io/node-id`
node label, so the mapping holds by construction rather than by how Ray happens to pack.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from embodied_rl.errors import ConfigError

NODE_ID_LABEL = "ray.io/node-id"
_HEAD_RESOURCE = "node:__internal_head__"


def ordered_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Alive nodes of `ray.nodes()`, head first, then by (address, node id)."""
    alive = [n for n in nodes if n.get("Alive")]
    return sorted(alive, key=lambda n: (_HEAD_RESOURCE not in n.get("Resources", {}), n.get("NodeManagerAddress", ""), n["NodeID"]))


def slot_nodes(nodes: Sequence[Mapping[str, Any]], num_nodes: int, slots_per_node: int,
               bundle: Mapping[str, float]) -> list[str]:
    """Node id of each slot: the first `num_nodes` ordered nodes that can hold `slots_per_node`
    bundles each. A ConfigError when fewer such nodes are alive."""
    fits, too_small = [], []
    for n in ordered_nodes(nodes):
        res = n.get("Resources", {})
        if all(res.get(k, 0.0) >= v * slots_per_node for k, v in bundle.items()):
            fits.append(n["NodeID"])
        else:
            too_small.append(f"{n['NodeID'][:8]} ({', '.join(f'{k}={res.get(k, 0):g}' for k in bundle)})")
    if len(fits) < num_nodes:
        need = ", ".join(f"{k}={v * slots_per_node:g}" for k, v in bundle.items())
        raise ConfigError(
            f"cluster.num_nodes={num_nodes}: only {len(fits)} Ray node(s) have {need} for {slots_per_node} slot(s) each"
            + (f"; too small: {'; '.join(too_small)}" if too_small else "")
            + "; lower cluster.num_cpu_slots or add nodes"
        )
    return [node for node in fits[:num_nodes] for _ in range(slots_per_node)]


def bundle_selectors(slot_node_ids: Sequence[str]) -> list[dict[str, str]]:
    """Ray bundle label selectors pinning bundle r to the node of slot r."""
    return [{NODE_ID_LABEL: node} for node in slot_node_ids]
