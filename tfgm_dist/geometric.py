"""Geometric graphs: Delaunay graphs of point sets, a random-weight operator that reads their
Cartesian edge attributes (principle P4), and a synthetic keypoint-matching task.

The paper's keypoint experiments run a training-free SplineCNN over Delaunay graphs with
Cartesian pseudo-coordinates :math:`\\mathbf{e}_{ij} \\in [0, 1]^2`. PyG's ``SplineConv``
needs the compiled ``pyg-lib`` (``>= 0.6``), which PyPI does not carry for torch 2.13 on CPU,
so :class:`RandomGMM` uses its closest relative that is plain PyTorch: ``GMMConv`` (MoNet),
a sum of kernels over the same pseudo-coordinates,

.. math::
    \\mathbf{x}'_i = \\frac{1}{|\\mathcal{N}(i)|} \\sum_{j \\in \\mathcal{N}(i)}
    \\sum_{k=1}^{K} w_k(\\mathbf{e}_{ij})\\, \\Theta_k \\mathbf{x}_j, \\qquad
    w_k(\\mathbf{e}) = \\exp\\big(-\\tfrac{1}{2} \\|(\\mathbf{e} - \\mu_k) / \\sigma\\|^2\\big),

with the kernel centres :math:`\\mu_k` fixed on the :math:`m \\times m` grid of SplineCNN's
knots over :math:`[0, 1]^2`, :math:`\\sigma` the knot spacing, and random
:math:`\\Theta_k \\sim \\mathcal{N}(0, 1 / (K d_{in}))`, as the paper's reference code draws
SplineCNN's weights. Weights cannot be dropped here (principle P3): without them the kernel
responses would multiply the width by :math:`K` at every layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GMMConv
from torch_geometric.transforms import Cartesian, Compose, Delaunay, FaceToEdge

from .graph import Graph


def delaunay_edges(pos: torch.Tensor) -> torch.Tensor:
    """Edges ``[2, E]`` (both directions) of the Delaunay triangulation of ``pos`` ``[N, 2]``."""
    if pos.dim() != 2 or pos.size(1) != 2:
        raise ValueError(f"pos must be [N, 2] points, got shape {tuple(pos.shape)}")
    data = Compose([Delaunay(), FaceToEdge()])(Data(pos=pos.float(), num_nodes=pos.size(0)))
    return data.edge_index


def cartesian(pos: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Cartesian pseudo-coordinates ``[E, 2]`` of the edges, in ``[0, 1]^2`` (PyG's
    ``Cartesian``: :math:`(\\mathbf{p}_j - \\mathbf{p}_i) / (2 \\max |\\cdot|) + 1/2` per graph)."""
    return Cartesian(cat=False)(Data(pos=pos.float(), edge_index=edge_index)).edge_attr


class RandomGMM(torch.nn.Module):
    """A training-free GMMConv network: TFGM's ``[F0; F1; ...; FL]`` with edge attributes.

    ``F0 = norm(X)`` and ``F_l = norm(conv_l(F_{l-1}, e))``, each row L2-normalised
    (principle P1), no nonlinearity, no root weight, no bias.

    Args:
        in_channels: width of the node features X.
        channels: width of every layer.
        layers: number of GMMConv layers L.
        kernel_size: knots per pseudo-coordinate dimension m (K = m^2 kernels for 2-D).
        seed: seeds the weights; both graphs of a match must use the same.

    Shapes: ``x`` ``[N, in_channels]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, 2]`` in
    ``[0, 1]^2``; output ``[N, in_channels + layers * channels]``.
    """

    def __init__(self, in_channels: int, channels: int, layers: int, kernel_size: int = 5,
                 seed: int = 0) -> None:
        super().__init__()
        if min(in_channels, channels, layers) < 1 or kernel_size < 2:
            raise ValueError(f"need in_channels, channels, layers >= 1 and kernel_size >= 2, "
                             f"got {in_channels}, {channels}, {layers}, {kernel_size}")
        knots = torch.linspace(0, 1, kernel_size)
        mu = torch.cartesian_prod(knots, knots)
        k = mu.size(0)
        gen = torch.Generator().manual_seed(seed)
        self.convs = torch.nn.ModuleList()
        for l in range(layers):
            d_in = in_channels if l == 0 else channels
            conv = GMMConv(d_in, channels, dim=2, kernel_size=k, root_weight=False, bias=False)
            with torch.no_grad():
                conv.mu.copy_(mu)
                conv.sigma.fill_(1.0 / (kernel_size - 1))
                conv.g.copy_(torch.randn(d_in, channels * k, generator=gen) / math.sqrt(k * d_in))
            self.convs.append(conv.requires_grad_(False))

    @torch.no_grad()
    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_attr: torch.Tensor) -> torch.Tensor:
        if edge_attr.dim() != 2 or tuple(edge_attr.shape) != (edge_index.size(1), 2):
            raise ValueError(f"edge_attr must be [E, 2] with E = {edge_index.size(1)}, got "
                             f"{tuple(edge_attr.shape)}")
        h = F.normalize(x.float(), dim=-1)
        blocks, n = [h], x.size(0)
        for conv in self.convs:
            # (h, None): no root term (PyG 2.8's GMMConv lacks ``root`` when root_weight=False)
            h = F.normalize(conv((h, None), edge_index, edge_attr, size=(n, n)), dim=-1)
            blocks.append(h)
        return torch.cat(blocks, dim=-1)

    def embed(self, graph: Graph) -> torch.Tensor:
        """The embedding of a point-set graph whose ``features`` are its 2-D coordinates."""
        if graph.features is None or graph.features.size(1) != 2:
            raise ValueError(f"{graph.source}: needs 2-D coordinates as node features")
        return self(graph.features, graph.edge_index, cartesian(graph.features, graph.edge_index))


@dataclass(frozen=True)
class Keypoints:
    """One synthetic keypoint graph: coordinates as features, Delaunay edges, and the
    template keypoint of every node (``-1`` for an outlier)."""

    graph: Graph
    keypoint: np.ndarray  # [N] int64


def keypoint_graph(template: np.ndarray, rng: np.random.Generator, *, jitter: float = 0.05,
                   max_rotation: float = math.pi / 6, outliers: int = 0,
                   name: str = "<keypoints>") -> Keypoints:
    """An instance of a 2-D ``template`` ``[P, 2]``: jittered, rotated, with outliers.

    Every keypoint moves by Gaussian noise of scale ``jitter`` (the template spans about
    ``[0, 1]^2``); the whole set is rotated by an angle uniform in ``±max_rotation``, scaled
    by a factor in ``[0.5, 2]`` and shifted; ``outliers`` points are drawn uniformly over the
    instance's bounding box. Coordinates are then centred and scaled to unit RMS radius (so
    shift and scale carry no signal), nodes are put in a random order, and the graph is the
    Delaunay triangulation.
    """
    p = template.shape[0]
    pts = template + jitter * rng.standard_normal(template.shape)
    angle = rng.uniform(-max_rotation, max_rotation)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    pts = (pts @ rot.T) * rng.uniform(0.5, 2.0) + rng.uniform(-5, 5, size=2)
    if outliers:
        low, high = pts.min(0), pts.max(0)
        pts = np.concatenate([pts, rng.uniform(low, high, size=(outliers, 2))])
    keypoint = np.concatenate([np.arange(p), np.full(outliers, -1)])
    order = rng.permutation(len(pts))
    pts, keypoint = pts[order], keypoint[order]
    pts = pts - pts.mean(0)
    pts = pts / np.sqrt((pts ** 2).sum(1).mean())
    pos = torch.from_numpy(pts).float()
    graph = Graph(ids=pa.array(np.arange(len(pts))), edge_index=delaunay_edges(pos),
                  features=pos, source=name)
    return Keypoints(graph, keypoint.astype(np.int64))
