"""The halo planner, pure: which rows of the operator and of the inputs each part holds, and
which rows it sends to which other part, layer after layer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..embed import RowBlock, row_block
from ..partition import Partition


@dataclass(frozen=True)
class GraphPart:
    """What the actor of one part needs of one graph, and what it sends to the others.

    A layer of part ``p`` reads the previous layer's rows of its halo: its own part's rows,
    which it made, and for each other part ``q`` in ``needs`` only the rows of ``q`` in its
    halo, which ``q`` sends as a slice of its output (``sends``), not its whole part.
    """

    block: RowBlock  # the part's rows of the operator, columns = its halo
    needs: list[int]  # other parts holding halo rows, in the order their slices are passed
    gather: np.ndarray  # halo rows within [own rows; the needed parts' slices]
    consumers: list[int]  # other parts whose halo holds some of this part's rows
    sends: list[np.ndarray]  # per consumer, the rows of this part it needs (its slice)


def graph_parts(op, parting: Partition) -> list[GraphPart]:
    """Each part's :class:`GraphPart` of one graph: its row block and the halo rows it
    exchanges with the other parts (its input rows travel apart: a part may make them)."""
    P = parting.num_parts
    blocks = [row_block(op, torch.from_numpy(parting.nodes(p))) for p in range(P)]
    halos = [b.halo.numpy() for b in blocks]
    owner = [parting.part[h] for h in halos]
    needs = [sorted(set(owner[p].tolist()) - {p}) for p in range(P)]
    consumers = [[p for p in range(P) if q in needs[p]] for q in range(P)]
    parts = []
    for p in range(P):
        gather = np.empty(halos[p].size, dtype=np.int64)
        own = owner[p] == p
        gather[own] = parting.position[halos[p][own]]
        offset = blocks[p].nodes.numel()
        for q in needs[p]:
            mine = owner[p] == q
            gather[mine] = offset + np.arange(int(mine.sum()))
            offset += int(mine.sum())
        sends = [parting.position[halos[c][owner[c] == p]] for c in consumers[p]]
        parts.append(GraphPart(blocks[p], needs[p], gather, consumers[p], sends))
    return parts
