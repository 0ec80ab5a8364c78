"""Simplified robot visual meshes for software rendering (`init_params.robot_visual_cell`).

Software Vulkan (lavapipe) transforms and sets up every triangle of a scene whatever the image
size, and the Panda's visual meshes hold ~135k of them: a 64 px camera picture costs ~28 ms of
CPU, ~25 ms of it on the robot (a 16 px picture costs nearly as much). Vertex clustering on a
grid of `cell` metres merges the vertices of each cell into their mean (normals and texture
coordinates likewise) and drops the triangles that collapse; at 8 mm the robot keeps ~24k
triangles and a 64 px picture differs from the full meshes' by ~0.5 intensity levels on
average (benchmarks/render_mesh.py). Only the robot's render bodies change: its collision
shapes, the physics and every other object in the scene are the task's own.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from embodied_rl.envs.mesh_clustering import grid_clusters, surviving_triangles

# Appended to the name of a render body built here: a body carrying it is already simplified
# (a task that reconfigures on reset rebuilds its robot, which then carries the full meshes again).
MARK = "#lod"


def cluster_vertices(vertices: np.ndarray, triangles: np.ndarray, normals: np.ndarray, uvs: np.ndarray,
                     cell: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vertex clustering of one triangle mesh on a grid of `cell` (same unit as the vertices).

    vertices float [V, 3], triangles int [F, 3], normals float [V, 3], uvs float [V, 2]
    -> (vertices float32 [K, 3], triangles uint32 [G, 3], normals float32 [K, 3] unit length,
    uvs float32 [K, 2]) with K <= V clusters and G <= F triangles: each cluster is the mean of
    its vertices; a triangle whose corners fall in fewer than 3 clusters is dropped, as is a
    repeat of a kept triangle; the kept ones keep their order and winding.
    """
    clusters = grid_clusters(vertices, cell)
    new_normals = clusters.mean(normals)
    new_normals /= np.maximum(np.linalg.norm(new_normals, axis=1, keepdims=True), 1e-12)
    tris = clusters.of_vertex[np.asarray(triangles, np.int64)]
    tris = tris[surviving_triangles(tris)]
    return (clusters.mean(vertices).astype(np.float32), tris.astype(np.uint32),
            new_normals.astype(np.float32), clusters.mean(uvs).astype(np.float32))


def simplify_robot_visuals(env: Any, cell: float) -> bool:
    """Replace the render body of every robot link of a ManiSkill env (`env.unwrapped`) on the CPU
    sim by one whose meshes are clustered on `cell` metres. Returns whether anything changed (a
    body already simplified is left alone, so calling it after every reset is cheap)."""
    import sapien

    render = sapien.render
    changed = False
    for link in env.agent.robot.get_links():
        for component in link._objs:  # one physx link per sub-scene; the CPU sim has one
            entity = component.entity
            body = entity.find_component_by_type(render.RenderBodyComponent)
            if body is None or body.name.endswith(MARK):
                continue
            new = render.RenderBodyComponent()
            new.name = body.name + MARK
            for shape in body.render_shapes:
                for part in _simplified_parts(shape, cell):
                    new.attach(part)
            new.visibility = body.visibility
            entity.remove_component(body)
            entity.add_component(new)
            changed = True
    return changed


def _simplified_parts(shape: Any, cell: float) -> list[Any]:
    """The render shapes replacing `shape`: one mesh per part of a triangle mesh (the shape's scale
    applied to its vertices), a primitive shape (box, capsule...) as it is. A part smaller than
    one cell collapses to nothing and is left out: it spans less than a pixel at the image sizes
    the setting is meant for."""
    import sapien

    render = sapien.render
    if not isinstance(shape, render.RenderShapeTriangleMesh):
        return [shape.clone()]
    out = []
    for part in shape.parts:
        vertices = part.vertices * np.asarray(shape.scale, np.float32)
        normals, uvs = part.get_vertex_normal(), part.get_vertex_uv()
        if normals.shape[0] != vertices.shape[0]:
            normals = np.zeros_like(vertices)
        if uvs.shape[0] != vertices.shape[0]:
            uvs = np.zeros((vertices.shape[0], 2), np.float32)
        v, f, n, uv = _clustered(vertices, part.triangles, normals, uvs, cell)
        if f.shape[0] == 0:
            continue
        mesh = render.RenderShapeTriangleMesh(v, f, n, uv, part.material)
        mesh.local_pose = shape.local_pose
        mesh.front_face = shape.front_face
        out.append(mesh)
    return out


# Tasks that reconfigure on reset (PegInsertionSide) rebuild the robot with its full meshes every
# episode, and clustering them again cost ~0.4 s per reset (benchmarks/reconfigure_reset.py).
# Keyed by content, so a mesh is clustered once per process whatever object carries it.
_CLUSTERED: dict[tuple[bytes, float], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
_CLUSTERED_MAX = 1024


def _clustered(vertices: np.ndarray, triangles: np.ndarray, normals: np.ndarray, uvs: np.ndarray,
               cell: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """cluster_vertices, remembered by the mesh's content and the cell."""
    digest = hashlib.blake2b(digest_size=16)
    for a in (vertices, triangles, normals, uvs):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(a.tobytes())
    key = (digest.digest(), float(cell))
    if key not in _CLUSTERED:
        if len(_CLUSTERED) >= _CLUSTERED_MAX:
            _CLUSTERED.pop(next(iter(_CLUSTERED)))
        arrays = cluster_vertices(vertices, triangles, normals, uvs, cell)
        for a in arrays:  # shared by every mesh built from them (SAPIEN copies what it is given)
            a.setflags(write=False)
        _CLUSTERED[key] = arrays
    return _CLUSTERED[key]
