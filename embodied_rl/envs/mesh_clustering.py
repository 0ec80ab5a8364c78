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
        values = np.asarray(values, np.float64)
        k = self.counts.shape[0]
        sums = [np.bincount(self.of_vertex, weights=values[:, d], minlength=k) for d in range(values.shape[1])]
        return np.stack(sums, axis=1) / self.counts[:, None]


def grid_clusters(vertices: np.ndarray, cell: float) -> GridClusters:
    """vertices [V, 3] -> the cluster of each on a grid of `cell` (the vertices' unit). Clusters
    are numbered in the lexicographic order of their cells."""
    cells = np.floor(np.asarray(vertices, np.float64) / cell).astype(np.int64)
    if len(cells) == 0:
        return GridClusters(np.zeros(0, np.int64), np.zeros(0, np.int64))
    cells -= cells.min(axis=0)
    extent = cells.max(axis=0) + 1
    if float(np.prod(extent.astype(np.float64))) < 2.0**62:
        # One integer per cell, in the same order as its (x, y, z): a 1-D unique is ~10x faster
        # than np.unique(axis=0), which dominated the clustering of a mesh.
        keys = (cells[:, 0] * extent[1] + cells[:, 1]) * extent[2] + cells[:, 2]
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    else:  # a grid too fine for one int64 per cell
        _, inverse, counts = np.unique(cells, axis=0, return_inverse=True, return_counts=True)
    return GridClusters(inverse.reshape(-1), counts)


def surviving_triangles(corners: np.ndarray) -> np.ndarray:
    """Triangles as clusters of their corners, int [F, 3] -> the indices (ascending) of those
    that survive clustering: three distinct clusters, and not a repeat of an earlier survivor
    (in any corner order). Kept triangles keep their winding."""
    corners = np.asarray(corners, np.int64)
    distinct = np.nonzero((corners[:, 0] != corners[:, 1]) & (corners[:, 1] != corners[:, 2]) & (corners[:, 0] != corners[:, 2]))[0]
    ordered = np.sort(corners[distinct], axis=1)
    n = int(corners.max()) + 1 if len(corners) else 1
    if float(n) ** 3 < 2.0**62:  # one integer per corner set, as in grid_clusters
        _, first = np.unique((ordered[:, 0] * n + ordered[:, 1]) * n + ordered[:, 2], return_index=True)
    else:
        _, first = np.unique(ordered, axis=0, return_index=True)
    return distinct[np.sort(first)]
