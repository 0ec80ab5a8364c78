"""Vertex clustering of triangle meshes on a grid: the simplification behind the simulators'
visual level-of-detail settings (ManiSkill's `robot_visual_cell`, LIBERO's `visual_mesh_cell`).

Software rasterisers (lavapipe, llvmpipe) pay for every triangle whatever the image size, so at
the 64-256 px pictures a policy reads, meshes of 10^4-10^5 triangles cost far more than they
show. Merging the vertices of each grid cell and dropping the triangles that collapse keeps the
shape to within a cell.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GridClusters:
    """The vertices of one mesh grouped by grid cell."""

    of_vertex: np.ndarray  # int64 [V]: the cluster of each vertex
    counts: np.ndarray     # int64 [K]: vertices per cluster

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Per-vertex values [V, D] -> their mean per cluster, float64 [K, D]."""
        out = np.zeros((self.counts.shape[0], values.shape[1]), np.float64)
        np.add.at(out, self.of_vertex, np.asarray(values, np.float64))
        return out / self.counts[:, None]


def grid_clusters(vertices: np.ndarray, cell: float) -> GridClusters:
    """vertices [V, 3] -> the cluster of each on a grid of `cell` (the vertices' unit)."""
    keys = np.floor(np.asarray(vertices, np.float64) / cell).astype(np.int64)
    _, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    return GridClusters(inverse.reshape(-1), counts)


def surviving_triangles(corners: np.ndarray) -> np.ndarray:
    """Triangles as clusters of their corners, int [F, 3] -> the indices (ascending) of those
    that survive clustering: three distinct clusters, and not a repeat of an earlier survivor
    (in any corner order). Kept triangles keep their winding."""
    corners = np.asarray(corners, np.int64)
    distinct = np.nonzero((corners[:, 0] != corners[:, 1]) & (corners[:, 1] != corners[:, 2]) & (corners[:, 0] != corners[:, 2]))[0]
    _, first = np.unique(np.sort(corners[distinct], axis=1), axis=0, return_index=True)
    return distinct[np.sort(first)]
