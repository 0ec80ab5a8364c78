"""The robot's visual meshes simplified for software rendering (init_params.robot_visual_cell):
the clustering as a pure function, then on a real ManiSkill3 PushCube-v1 sub-env (64 px)."""
from __future__ import annotations

import numpy as np
import pytest

from embodied_rl.envs.maniskill.visual_lod import MARK, cluster_vertices


def grid_mesh(n: int, size: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A flat square of n x n quads (2 triangles each) in the xy plane, counter-clockwise from +z."""
    xs = np.linspace(0.0, size, n + 1)
    v = np.array([(x, y, 0.0) for y in xs for x in xs], np.float32)
    tris = []
    for j in range(n):
        for i in range(n):
            a, b, c, d = j * (n + 1) + i, j * (n + 1) + i + 1, (j + 1) * (n + 1) + i, (j + 1) * (n + 1) + i + 1
            tris += [(a, b, d), (a, d, c)]
    return v, np.array(tris, np.uint32)


def test_clustering_merges_cells_drops_collapsed_triangles_and_keeps_winding():
    v, f = grid_mesh(8)  # vertices 0.125 apart
    n = np.tile([[0.0, 0.0, 1.0]], (len(v), 1)).astype(np.float32)
    uv = v[:, :2].copy()
    # a cell finer than the spacing changes nothing
    v1, f1, _, _ = cluster_vertices(v, f, n, uv, 0.01)
    assert len(v1) == len(v) and len(f1) == len(f)
    assert np.allclose(np.sort(v1, axis=0), np.sort(v, axis=0), atol=1e-6)
    # a cell of 2.5 spacings: fewer vertices and triangles, none degenerate or repeated
    v2, f2, n2, uv2 = cluster_vertices(v, f, n, uv, 0.3)
    assert len(v2) < len(v) and 0 < len(f2) < len(f)
    assert all(len(set(t)) == 3 for t in f2.tolist()) and len({tuple(sorted(t)) for t in f2.tolist()}) == len(f2)
    normals = np.cross(v2[f2[:, 1]] - v2[f2[:, 0]], v2[f2[:, 2]] - v2[f2[:, 0]])
    assert (normals[:, 2] > 0).all()  # every kept triangle still faces +z
    assert np.allclose(n2, [0.0, 0.0, 1.0]) and uv2.shape == (len(v2), 2)
    assert v2.dtype == np.float32 and f2.dtype == np.uint32
    # the whole square in one cell collapses to a point: no triangle left
    assert len(cluster_vertices(v, f, n, uv, 10.0)[1]) == 0


def _robot_triangles(env) -> int:
    import sapien

    total = 0
    for link in env.unwrapped.agent.robot.get_links():
        body = link._objs[0].entity.find_component_by_type(sapien.render.RenderBodyComponent)
        if body is not None:
            total += sum(len(p.triangles) for s in body.render_shapes for p in getattr(s, "parts", []))
    return total


@pytest.mark.maniskill
def test_a_sub_env_renders_the_simplified_robot_close_to_the_full_one():
    from embodied_rl.envs.maniskill import ManiSkillParams
    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv
    from embodied_rl.envs.maniskill.visual_lod import simplify_robot_visuals

    envs = {cell: ManiSkillSubEnv(ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64, robot_visual_cell=cell),
                                  "push the cube") for cell in (None, 0.008)}
    try:
        full, lod = envs[None], envs[0.008]
        assert _robot_triangles(lod.env) < 0.3 * _robot_triangles(full.env)
        action = np.array([0.5, 0.0, -0.3, 0.0, 0.0, 0.0, 1.0], np.float32)
        for reset_id in (5, 6):  # the second reset finds the robot simplified already
            a, b = full.reset(reset_id)["main_image"], lod.reset(reset_id)["main_image"]
            diffs = [np.abs(a.astype(int) - b.astype(int)).mean()]
            for _ in range(4):
                a, b = full.step(action)[0]["main_image"], lod.step(action)[0]["main_image"]
                diffs.append(np.abs(a.astype(int) - b.astype(int)).mean())
            assert 0.0 < max(diffs) < 2.0, diffs  # the meshes changed, the picture hardly
            assert not simplify_robot_visuals(lod.env.unwrapped, 0.008)
        # physics untouched: the same actions move the robot identically
        assert np.array_equal(full.observe()["state"], lod.observe()["state"])
        import sapien

        bodies = [link._objs[0].entity.find_component_by_type(sapien.render.RenderBodyComponent)
                  for link in lod.env.unwrapped.agent.robot.get_links()]
        assert all(b.name.endswith(MARK) for b in bodies if b is not None)
    finally:
        for env in envs.values():
            env.close()


def sphere_mesh(n: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """A closed UV sphere: n rings of 2n vertices between two poles, outward-facing triangles."""
    rings = [(np.sin(np.pi * (j + 1) / (n + 1)), np.cos(np.pi * (j + 1) / (n + 1))) for j in range(n)]
    ring_v = [(r * np.cos(np.pi * i / n), r * np.sin(np.pi * i / n), z) for r, z in rings for i in range(2 * n)]
    v = np.array([(0.0, 0.0, 1.0), *ring_v, (0.0, 0.0, -1.0)], np.float32) * radius
    at = lambda j, i: 1 + j * 2 * n + i % (2 * n)
    tris = [(0, at(0, i), at(0, i + 1)) for i in range(2 * n)]
    for j in range(n - 1):
        for i in range(2 * n):
            tris += [(at(j, i), at(j + 1, i), at(j + 1, i + 1)), (at(j, i), at(j + 1, i + 1), at(j, i + 1))]
    tris += [(len(v) - 1, at(n - 1, i + 1), at(n - 1, i)) for i in range(2 * n)]
    return v, np.array(tris, np.uint32)


def _mjcf_with_two_meshes(n: int) -> str:
    """A MuJoCo model whose two identical sphere meshes are used by a render-only geom and by a
    colliding one (a falling body)."""
    v, f = sphere_mesh(n, 0.05)
    verts, faces = " ".join(map(str, v.reshape(-1).tolist())), " ".join(map(str, f.reshape(-1).tolist()))
    return f"""<mujoco><asset>
      <mesh name="seen" vertex="{verts}" face="{faces}"/><mesh name="touched" vertex="{verts}" face="{faces}"/>
    </asset><worldbody>
      <geom type="plane" size="1 1 0.1"/>
      <geom type="mesh" mesh="seen" contype="0" conaffinity="0" pos="0.5 0 0.5"/>
      <body pos="0 0 0.2"><freejoint/><geom type="mesh" mesh="touched"/></body>
    </worldbody></mujoco>"""


def test_libero_simplification_touches_render_only_meshes_in_place():
    import mujoco

    from embodied_rl.envs.libero.visual_lod import (
        render_only_meshes,
        simplify_visual_meshes,
    )

    full, simple = (mujoco.MjModel.from_xml_string(_mjcf_with_two_meshes(40)) for _ in range(2))
    seen, touched = (mujoco.mj_name2id(full, mujoco.mjtObj.mjOBJ_MESH, name) for name in ("seen", "touched"))
    assert render_only_meshes(full).tolist() == [i == seen for i in range(full.nmesh)]
    before, after = simplify_visual_meshes(simple, 0.025)  # vertices ~4 mm apart on a 5 cm sphere
    assert before == full.mesh_facenum[seen] and 0 < after < before / 8
    assert simple.mesh_facenum[seen] == after and simple.mesh_vertnum[seen] < full.mesh_vertnum[seen]
    fa, fn, vn = simple.mesh_faceadr[seen], simple.mesh_facenum[seen], simple.mesh_vertnum[seen]
    faces = simple.mesh_face[fa:fa + fn]
    assert faces.max() < vn and all(len(set(t)) == 3 for t in faces.tolist())
    for name in ("mesh_vert", "mesh_face", "mesh_vertnum", "mesh_facenum"):  # the colliding mesh is the task's own
        a, b = getattr(full, name), getattr(simple, name)
        if name.endswith("num"):
            assert a[touched] == b[touched]
        else:
            adr = getattr(full, name.replace("vert", "vertadr").replace("face", "faceadr"))[touched]
            num = full.mesh_vertnum[touched] if name == "mesh_vert" else full.mesh_facenum[touched]
            assert np.array_equal(a[adr:adr + num], b[adr:adr + num])
    # the physics never reads render-only meshes: the same fall, bit for bit
    states = []
    for model in (full, simple):
        data = mujoco.MjData(model)
        for _ in range(200):
            mujoco.mj_step(model, data)
        states.append(data.qpos.copy())
    assert np.array_equal(*states) and states[0][2] < 0.2


@pytest.mark.parametrize("cell", [0.02, 1e-12])  # one int64 key per cell, and a grid too fine for one
def test_grid_clusters_number_cells_in_lexicographic_order(cell):
    from embodied_rl.envs.mesh_clustering import grid_clusters, surviving_triangles

    v, f = sphere_mesh(30, 0.05)
    v = np.concatenate([v, v[:10]])  # repeated vertices share a cluster at any cell
    cells = np.floor(v.astype(np.float64) / cell).astype(np.int64)
    _, inverse, counts = np.unique(cells, axis=0, return_inverse=True, return_counts=True)
    clusters = grid_clusters(v, cell)
    assert np.array_equal(clusters.of_vertex, inverse.reshape(-1)) and np.array_equal(clusters.counts, counts)
    assert np.allclose(clusters.mean(v)[clusters.of_vertex[:10]], v[:10], atol=cell + 1e-7)
    corners = np.concatenate([clusters.of_vertex[f], clusters.of_vertex[f][:5, ::-1]])  # reversed repeats at the end
    seen, expected = set(), []
    for i, t in enumerate(corners.tolist()):
        if len(set(t)) == 3 and tuple(sorted(t)) not in seen:
            seen.add(tuple(sorted(t)))
            expected.append(i)
    assert surviving_triangles(corners).tolist() == expected and expected[-1] < len(f)


def test_a_mesh_is_clustered_once_per_content_and_cell():
    from embodied_rl.envs.maniskill.visual_lod import _clustered

    v, f = grid_mesh(8)
    n, uv = np.tile([[0.0, 0.0, 1.0]], (len(v), 1)).astype(np.float32), v[:, :2].copy()
    first = _clustered(v, f, n, uv, 0.3)
    assert _clustered(v.copy(), f.copy(), n, uv, 0.3) is first  # same content: remembered
    assert all(np.array_equal(a, b) for a, b in zip(first, cluster_vertices(v, f, n, uv, 0.3)))
    assert _clustered(v, f, n, uv, 0.2) is not first and _clustered(v + 1.0, f, n, uv, 0.3) is not first
