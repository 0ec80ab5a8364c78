"""LIBERO's visual meshes simplified for software rendering (`init_params.visual_mesh_cell`).

MuJoCo draws LIBERO's scenes with llvmpipe here, which transforms and sets up every triangle
whatever the image size. A libero_spatial scene holds ~290k triangles in meshes that only
render (each of its two black bowls has ~43k), so a 64 px camera picture costs ~0.1 s of CPU
and a step, with two cameras, ~0.2 s. Clustering those meshes' vertices on an 8 mm grid leaves
~45k triangles and makes a 64 px step take ~3.5x less CPU (benchmarks/libero_render.py). Meshes any
colliding geom uses, and therefore the physics, stay LIBERO's own.

The compiled model is edited in place (MuJoCo's mesh arrays have room for a mesh's original
size, and a simplified mesh is smaller) and re-uploaded to the render context made from it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.envs.mesh_clustering import grid_clusters, surviving_triangles


def render_only_meshes(model: Any) -> np.ndarray:
    """bool [nmesh]: the meshes of an MjModel that only non-colliding geoms (contype =
    conaffinity = 0) use."""
    import mujoco

    rendered, colliding = np.zeros(model.nmesh, bool), np.zeros(model.nmesh, bool)
    for g in np.nonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_MESH)[0]:
        mesh = model.geom_dataid[g]
        if model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0:
            rendered[mesh] = True
        else:
            colliding[mesh] = True
    return rendered & ~colliding


def simplify_visual_meshes(model: Any, cell: float, context: Any = None) -> tuple[int, int]:
    """Cluster every render-only mesh of `model` (an MjModel) on a grid of `cell` metres, in
    place, and upload the changed meshes to `context` (an MjrContext made from the model, or None
    when none exists yet). Returns (triangles before, after) over those meshes.

    Per mesh: its first K vertex slots take the K cluster means, its faces the surviving
    triangles (corners renumbered to clusters; each corner keeps its own normal and texture
    coordinate), its vertex and face counts shrink to K and the survivors.
    """
    import mujoco

    before = after = 0
    for i in np.nonzero(render_only_meshes(model))[0]:
        va, vn = model.mesh_vertadr[i], model.mesh_vertnum[i]
        fa, fn = model.mesh_faceadr[i], model.mesh_facenum[i]
        clusters = grid_clusters(model.mesh_vert[va:va + vn], cell)
        corners = clusters.of_vertex[model.mesh_face[fa:fa + fn]]
        kept = surviving_triangles(corners)
        means = clusters.mean(model.mesh_vert[va:va + vn])
        normals, texcoords = model.mesh_facenormal[fa:fa + fn][kept], model.mesh_facetexcoord[fa:fa + fn][kept]
        model.mesh_vert[va:va + len(means)] = means
        model.mesh_face[fa:fa + len(kept)] = corners[kept]
        model.mesh_facenormal[fa:fa + len(kept)] = normals
        model.mesh_facetexcoord[fa:fa + len(kept)] = texcoords
        model.mesh_vertnum[i], model.mesh_facenum[i] = len(means), len(kept)
        before, after = before + int(fn), after + len(kept)
        if context is not None:
            mujoco.mjr_uploadMesh(model, context, int(i))
    return before, after
