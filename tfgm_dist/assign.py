"""Stage 6a, assign: decode a matching from similarity scores.

Every decoder reads the sparse top-k :class:`~tfgm_dist.search.Candidates` (or, for the
Hungarian method on small graphs, a dense score matrix) and returns ``[n_s]`` int64 target
numbers, ``-1`` where a source gets no target. :func:`decode` is the stage: it picks the
decoder that ``[assign]`` names for a scored pair (the dense Hungarian by the matrix's size).

Ties: nothing here breaks ties on node numbers. Equal scores are resolved by the position in
the candidate list (``argmax``, ``mutual``) or by the solver's own order (scipy), so the
pipeline's seeded shuffle of the target numbering is what keeps ties from favouring equal ids.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import linear_sum_assignment

from .config import AssignConfig
from .errors import InputError
from .refine import decoding
from .search import Candidates, distinct_rows

if TYPE_CHECKING:
    from .graph import Graph
    from .pipeline import Scored

log = logging.getLogger(__name__)

# The dense Hungarian refuses matrices above a quarter of this machine's memory.
DENSE_MAX_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4

ONE_TO_ONE_METHODS = ("auto", "hungarian", "sparse", "sinkhorn")


def argmax(c: Candidates) -> torch.Tensor:
    """The best candidate of each source: ``[n]`` int64, ``-1`` for an empty row.

    ``best_i = index[i, argmax_j scores[i, j]]``; among equal scores the first in the list.
    """
    if c.k == 0:
        return torch.full((c.index.size(0),), -1, dtype=torch.long)
    return c.index.gather(1, c.scores.argmax(dim=1, keepdim=True)).squeeze(1)


def listing_best(c: Candidates, rows: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each target on the lists ``c`` of the sources ``rows``: the source listing it with
    the highest score (among equal scores the lowest number), and that score, as
    ``(targets, sources, scores)`` (:func:`best_of`).

    Where no backward search ran (an IVF search at scale), a target's best source is taken
    among the rows listing it, so that mutual best matches, and the confidence fitted on
    them, exist on every run. It can differ from a backward search's only where a source
    scores the target above its best lister yet holds ``k`` better targets."""
    valid = c.index >= 0
    return best_of(c.index[valid], rows[:, None].expand_as(c.index)[valid], c.scores[valid])


def is_best_source(matched: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor,
                   sources: torch.Tensor, num_targets: int) -> torch.Tensor:
    """``[n]`` whether row ``rows[i]`` is the best source of its decoded target
    ``matched[i]`` (``-1``: none), the targets' best sources given as ``sources`` of
    ``targets`` (the others have none): the mutual best matches."""
    back = torch.full((num_targets,), -1, dtype=torch.long)
    back[targets] = sources
    return (matched >= 0) & (back[matched.clamp(min=0)] == rows)


def best_of(targets: torch.Tensor, sources: torch.Tensor, scores: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Of entries ``(target, source, score)``, the best of each target: the highest score,
    then the lowest source. Targets ascending; the best of several parts' bests is the best
    of all their entries, so the parts of a Ray run find one process's. Two scatter passes
    (10M entries: 0.2 s, where a lexicographic sort took 6.0 s)."""
    none = torch.iinfo(torch.long).max
    n = int(targets.max()) + 1 if targets.numel() else 0
    top = torch.full((n,), -torch.inf).scatter_reduce(0, targets, scores, "amax")
    at_top = scores == top[targets]
    low = torch.full((n,), none).scatter_reduce(0, targets[at_top], sources[at_top], "amin")
    listed = torch.nonzero(low < none).squeeze(1)
    return listed, low[listed], top[listed]


def mutual(c: Candidates, reverse: Candidates) -> torch.Tensor:
    """Mutual nearest neighbours: ``[n]`` int64, ``t = best(s)`` when ``best(t) = s``, else ``-1``.

    ``c`` holds the source->target lists (``[n_s, k]``), ``reverse`` the target->source lists
    (``[n_t, k']``, index = source numbers).
    """
    best, back = argmax(c), argmax(reverse)
    n_s, n_t = best.numel(), back.numel()
    if n_s and int(best.max()) >= n_t:
        raise ValueError(f"c names target {int(best.max())} but reverse has only {n_t} rows")
    if n_t and int(back.max()) >= n_s:
        raise ValueError(f"reverse names source {int(back.max())} but c has only {n_s} rows")
    ok = (best >= 0) & (back[best.clamp(min=0)] == torch.arange(n_s))
    return torch.where(ok, best, -1)


def hungarian(scores: torch.Tensor, *, max_bytes: int = 2 << 30) -> torch.Tensor:
    """Maximum-score one-to-one matching of a dense ``[n_s, n_t]`` matrix: ``[n_s]`` int64.

    Solves ``max_P sum_ij P_ij scores_ij`` over partial permutations matching
    ``min(n_s, n_t)`` pairs (``scipy.optimize.linear_sum_assignment``); with more sources
    than targets the left-over sources get ``-1``. Every pair is an allowed edge. Refuses
    when the float64 cost matrix (``n_s * n_t * 8`` bytes) exceeds ``max_bytes``.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be a [n_s, n_t] matrix, got shape {tuple(scores.shape)}")
    n_s, n_t = scores.shape
    need = n_s * n_t * 8
    if need > max_bytes:
        raise ValueError(f"hungarian: a dense {n_s}x{n_t} cost matrix needs {need / 2**30:.1f} "
                         f"GiB > max_bytes {max_bytes / 2**30:.1f} GiB; use the sparse solver "
                         f"on the top-k candidates instead (one_to_one(..., method=\"sparse\"), "
                         f"--assign one-to-one)")
    rows, cols = linear_sum_assignment(scores.double().numpy(), maximize=True)
    out = torch.full((n_s,), -1, dtype=torch.long)
    out[torch.from_numpy(rows)] = torch.from_numpy(cols).long()
    return out


def sinkhorn_dense(scores: torch.Tensor, tau: float = 0.05, iters: int = 50) -> torch.Tensor:
    """Sinkhorn normalisation of ``exp(scores / tau)``: ``[n_s, n_t]`` probabilities.

    Log domain. Starting from the row-normalised ``log P = log_softmax(scores / tau)``, each
    of ``iters`` rounds scales every column whose sum exceeds 1 down to 1 (KL projection onto
    ``{sum_i P_ij <= 1}``), then rescales every row to sum 1. The result's rows sum to 1
    exactly; its column sums are ``<= 1`` up to convergence (they cannot all be when
    ``n_s > n_t``). For ``n_s = n_t`` this is the usual doubly stochastic Sinkhorn.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be a [n_s, n_t] matrix, got shape {tuple(scores.shape)}")
    _check_sinkhorn(tau, iters)
    log_p = _normalise_rows(scores / tau)
    for _ in range(iters):
        log_p = _normalise_rows(log_p - torch.logsumexp(log_p, dim=0).clamp(min=0))
    return log_p.exp()


def sinkhorn_sparse(c: Candidates, num_targets: int, tau: float = 0.05,
                    iters: int = 50) -> Candidates:
    """:func:`sinkhorn_dense` restricted to the candidate entries: log-probabilities.

    Entries outside the lists count as probability 0, so column sums run over the sources
    listing that target (``index_add`` over target numbers); ``n_s x n_t`` is never formed.
    Returns the candidates re-sorted by ``log P_ij`` (padding stays ``-1`` / ``-inf``), so
    ``exp`` of each row sums to 1. With every target listed (``k = n_t``) this equals the dense
    result. The column step needs no max-shift: after a row step every ``log P <= 0``, and a
    column whose ``exp`` sum underflows has true sum ``< 1`` and is left alone anyway.
    """
    _check_targets(c, num_targets)
    _check_sinkhorn(tau, iters)
    valid = c.index >= 0
    cols = c.index.masked_fill(~valid, num_targets)  # padding lands in a discarded bin
    log_p = _normalise_rows((c.scores / tau).masked_fill(~valid, -torch.inf))
    for _ in range(iters):
        col_sum = torch.zeros(num_targets + 1, dtype=log_p.dtype).index_add_(
            0, cols.flatten(), log_p.exp().flatten())
        log_p = _normalise_rows(log_p - col_sum.log().clamp(min=0)[cols])
    return Candidates.sorted(log_p, c.index)


AUCTION_EPS = 1e-4  # the auction's bid increment at the start, on values in [0, 1]
# Auction rounds after which epsilon grows by EPS_GROWTH. Real lists with scores that differ
# end long before (DBP15k 9-21 rounds, the 1M pair 4). Not fewer: on the 2,000-node synthetic
# pair matched on degrees alone (19,736 rounds), one-to-one accuracy was 0.512 with 3,000,
# 0.416 with 1,000 and 0.281 with 300 (argmax: 0.459).
ROUNDS_PER_EPS = 3000
EPS_GROWTH = 2.0

# The auction's messages, NumPy arrays (as its state: see Bidders):
Bids = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # target, bid, source, row
Outcome = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # won, unseated, t, price


def sparse_one_to_one(c: Candidates, num_targets: int, eps: float = AUCTION_EPS
                      ) -> torch.Tensor:
    r"""One-to-one matching over the candidate edges only: ``[n_s]`` int64, ``-1`` = unmatched.

    Maximises :math:`\sum_{(i,j) \in M} w_{ij}` over matchings :math:`M` of candidate edges,

    .. math::
        w_{ij} = \frac{s_{ij} - \min s}{\max s - \min s} \in [0, 1],

    where a source may stay unmatched at value 0, the value of the worst candidate. So the
    matching is not forced to maximum cardinality: a source whose true target is missing from
    its list is left out instead of stealing a target and displacing the chain of sources
    behind it (on DBP15k zh_en with refinement, forcing cardinality cost 1.8 points).

    Solved by a forward auction (Bertsekas), vectorised over all unassigned sources at once:
    each bids for its best target :math:`j` (value :math:`v_1 = w_{ij} - p_j`) the price
    :math:`p_j + v_1 - v_2 + \epsilon` (:math:`v_2`: its second best, staying unmatched
    included), and each target goes to its highest bidder (ties: the lowest source number),
    unseating the previous holder. Prices start at 0, so the result is within
    :math:`n_s \epsilon` of the optimum, and every source ends within :math:`\epsilon` of its
    best choice at the final prices. It runs in near-linear time on candidate lists that
    mostly agree, where scipy's exact LAPJVsp took over 5 minutes for 1M x 10. Sources that
    share one list (the leaves of a hub in a featureless network) bid together, each for
    another of its best targets (:meth:`Bidders._together`). Lists where many sources tie
    on the same targets raise prices by only ``eps`` a round (2,000 sources on degree
    features alone took 130,000 rounds), so every :data:`ROUNDS_PER_EPS` rounds ``eps``
    doubles, and the bound with it (logged). Candidates with score ``-inf`` are not edges.

    The rounds are :func:`auction`'s over one :class:`Bidders` and one :class:`Sellers`
    (:func:`auctioned`); on Ray each part holds one of each (:mod:`tfgm_dist.distributed`),
    with the same result unless sources sharing a list fall in several parts
    (:func:`tfgm_dist.distributed.one_to_one` says when).
    """
    _check_targets(c, num_targets)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if c.k == 0:
        return torch.full((c.index.size(0),), -1)
    return auctioned(c, num_targets, eps)[0]


def auctioned(c: Candidates, num_targets: int, eps: float = AUCTION_EPS
              ) -> tuple[torch.Tensor, int]:
    """:func:`sparse_one_to_one`'s matching of lists ``c`` (``k >= 1``), and the number of
    auction rounds it took."""
    bidders = Bidders(c, torch.arange(c.index.size(0)), num_targets, spanning([score_span(c)]))
    sellers = Sellers(np.arange(num_targets))
    state: dict[str, list] = {"outcome": []}

    def bid(e: float) -> int:
        free, state["bids"] = bidders.bid(e, *state["outcome"])
        return free

    def resolve() -> None:
        state["outcome"] = sellers.resolve(*state["bids"])

    rounds = auction(bid, resolve, eps, c.index.size(0))[0]
    return bidders.matched(), rounds


def score_span(c: Candidates) -> tuple[float, float] | None:
    """The lowest and highest score of the candidate edges (``None`` when there is none),
    over which :class:`Bidders` scale the scores to ``[0, 1]``; checks the lists."""
    edge = (c.index >= 0) & (c.scores != -torch.inf)
    if torch.isnan(c.scores[edge]).any():
        raise ValueError("candidate scores must not be NaN")
    _check_no_repeats(c.index, edge)
    s = c.scores[edge].double()
    return (float(s.min()), float(s.max())) if s.numel() else None


def spanning(spans: list[tuple[float, float] | None]) -> tuple[float, float]:
    """The span of several parts' lists (:func:`score_span`); ``(0, 1)`` when none has edges."""
    known = [s for s in spans if s is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else (0.0, 1.0)


def auction(bid: Callable[[float], int], resolve: Callable[[], None], eps: float, size: int,
            *, rounds: int = 0, stop: int | None = None) -> tuple[int, float, bool]:
    """The rounds of :func:`sparse_one_to_one`: ``bid(eps)`` settles the last round's outcome
    and makes the free sources bid, returning how many were free (0 ends it); ``resolve()``
    gives each target to its best bidder. Doubles ``eps`` every :data:`ROUNDS_PER_EPS`
    rounds. ``size``: the number of sources (for the log).

    ``rounds`` already ran (a resumed auction, ``eps`` its epsilon); with ``stop``, returns
    unfinished after that many rounds in all. Returns the rounds, epsilon and whether it
    finished."""
    start = eps
    while stop is None or rounds < stop:
        e = eps * EPS_GROWTH if (rounds + 1) % ROUNDS_PER_EPS == 0 else eps
        if not bid(e):
            break
        rounds, eps = rounds + 1, e
        resolve()
    else:
        return rounds, eps, False
    log.info("one-to-one: auction over %d sources took %d rounds", size, rounds)
    if eps > start:
        log.warning("one-to-one: tied candidate lists; epsilon raised to %g to finish, so the "
                    "matching is within %.3g of the optimum (values in [0, 1])", eps, size * eps)
    return rounds, eps, True


class Bidders:
    """The sources' side of the auction: some sources' candidate lists, what each holds, and
    the prices of the targets they list (kept current by every round's outcome).

    ``c``: ``[n, k]`` lists (``k >= 1``) of the sources numbered ``sources`` (``[n]``: ties
    go to the lowest number); ``span``: :func:`spanning` of every part's lists; ``home``:
    ``[num_targets]`` which of the ``parts`` :class:`Sellers` sells each target (``None``:
    one sells all).

    The state and the messages are NumPy arrays: a round gathers a few thousand prices and
    values, and torch's indexing of such small tables took 1.3 ms where NumPy's ``take``
    takes 0.13 ms (the featureless flickr_lastfm pair's 6,109 rounds: 14.4 s in torch).
    Messages received through Ray are read-only, and are only read.
    """

    def __init__(self, c: Candidates, sources: torch.Tensor, num_targets: int,
                 span: tuple[float, float], home: np.ndarray | None = None, parts: int = 1
                 ) -> None:
        _check_targets(c, num_targets)
        n, self.k = c.index.shape
        low, high = span
        edge = (c.index >= 0) & (c.scores != -torch.inf)
        # column k is each source's private "unmatched" option: value 0, price 0 for ever
        self.value = torch.cat([((c.scores.double() - low) / ((high - low) or 1.0))
                                .masked_fill(~edge, -torch.inf),
                                torch.zeros(n, 1, dtype=torch.float64)], 1).numpy()
        self.target = torch.cat([c.index.masked_fill(~edge, num_targets),
                                 torch.full((n, 1), num_targets)], 1).numpy()
        home = (np.zeros(num_targets, dtype=np.int64) if home is None else
                np.asarray(home, dtype=np.int64))
        self.home = np.append(home, -1)[self.target]
        known, slot = np.unique(self.target, return_inverse=True)
        self.slot = slot.reshape(self.target.shape).astype(np.int32)  # half the bytes read
        self.slot_of = np.full(num_targets + 1, -1)  # a target's slot, -1 where not listed
        self.slot_of[known] = np.arange(known.size)
        self.price = np.zeros(known.size)
        self.sources, self.parts = np.asarray(sources, dtype=np.int64), parts
        self.group = equal_rows(self.target, self.value)
        self.choice = np.full(n, -1)  # column of the source's target; k: unmatched
        self.free = np.arange(n)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []

    def bid(self, eps: float, *outcome: Outcome) -> tuple[int, list[Bids]]:
        """Settle the last round (``outcome``: each part's :meth:`Sellers.resolve` for this
        part), then bid: the number of free sources and the bids for each part's targets."""
        self._settle(outcome)
        free = self.free
        alone = self.group.take(free) < 0
        bidding = [self._alone(free[alone], eps), self._together(free[~alone], eps)]
        row, col, bid = (np.concatenate([b[i] for b in bidding]) for i in range(3))
        t = self.target[row, col]
        home = self.home[row, col]
        self.pending, bids = [], []
        for p in range(self.parts):
            m = home == p
            self.pending.append((row[m], col[m]))
            bids.append((t[m], bid[m], self.sources.take(row[m]), row[m]))
        return free.size, bids

    def _alone(self, free: np.ndarray, eps: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The bids of the free sources ``free`` whose lists no other source has: each its
        best column, at the price that leaves it its second best value less ``eps``.
        Returns the bidding rows, their columns and bids; the others stay unmatched."""
        net = self.value.take(free, axis=0) - self.price.take(self.slot.take(free, axis=0))
        best = torch.from_numpy(net).topk(2, dim=1)
        values, col = best.values.numpy(), best.indices[:, 0].numpy()
        bidding = col != self.k
        self.choice[free[~bidding]] = self.k
        row, col = free[bidding], col[bidding]
        return row, col, (self.price.take(self.slot[row, col]) + values[bidding, 0]
                          - values[bidding, 1] + eps)

    def _together(self, free: np.ndarray, eps: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_alone` for free sources that share their list with others (``group``).
        The ``g`` free members of a group, by source number, bid for its ``g`` best targets,
        one each, at the price that leaves each the ``g + 1``-th best value less ``eps``
        (the private option of staying unmatched counts for every member at once): so ``g``
        sources with one list are seated in one round, where one at a time took a round
        each and raised each price by ``eps`` only (the featureless flickr_lastfm pair's
        12,893 sources have 2,655 lists, the largest 526 times; ~16,500 rounds an auction).
        With ``g = 1`` these are :meth:`_alone`'s bids."""
        if not free.size:
            return free, free, np.zeros(0)
        group = self.group.take(free)
        order = np.lexsort((self.sources.take(free), group))
        free, group = free[order], group[order]
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        size = np.diff(np.r_[starts, free.size])
        first = free[starts]
        net = self.value.take(first, axis=0) - self.price.take(self.slot.take(first, axis=0))
        net[:, self.k] = -np.inf
        cols = np.argsort(-net, axis=1, kind="stable")
        ranked = np.take_along_axis(net, cols, 1)
        better = (ranked > 0).sum(1)  # targets worth more than staying unmatched
        after = np.where(size < better, ranked[np.arange(first.size),
                                               np.minimum(size, self.k)], 0.0)
        which = np.repeat(np.arange(first.size), size)
        rank = np.arange(free.size) - np.repeat(starts, size)
        seated = rank < better[which]
        self.choice[free[~seated]] = self.k
        row, which, rank = free[seated], which[seated], rank[seated]
        col = cols[which, rank]
        return row, col, (self.price.take(self.slot[row, col]) + ranked[which, rank]
                          - after[which] + eps)

    def _settle(self, outcome: tuple[Outcome, ...]) -> None:
        if not outcome:
            return
        lost = []
        for (row, col), (won, unseated, t, price) in zip(self.pending, outcome):
            self.choice[unseated] = -1
            self.choice[row[won]] = col[won]
            lost += [row[~won], unseated]
            at = self.slot_of[t]
            listed = at >= 0
            self.price[at[listed]] = price[listed]
        self.free = np.concatenate(lost)

    def matched(self) -> torch.Tensor:
        """``[n]`` each source's target, ``-1`` where it stays unmatched."""
        col = self.choice.clip(max=self.k - 1)[:, None]
        picked = np.take_along_axis(self.target, col, 1)[:, 0]
        return torch.from_numpy(np.where(self.choice < self.k, picked, -1))


def equal_rows(target: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``[n]`` a group number for each row of ``target`` and ``value`` (``[n, k]``) that
    equals another row in both (:func:`~tfgm_dist.search.distinct_rows`), ``-1`` for the
    rows no other equals. Lists come in a canonical order (:meth:`Candidates.sorted`), so
    equal lists are equal rows."""
    _, group = distinct_rows(target, value)
    return np.where(np.bincount(group)[group] > 1, group, -1)


class Sellers:
    """The targets' side of the auction: the price and the holder of the targets ``nodes``
    (``[m]`` ascending target numbers), in NumPy arrays like :class:`Bidders`."""

    def __init__(self, nodes: np.ndarray) -> None:
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.position = np.zeros(int(self.nodes.max(initial=-1)) + 1, dtype=np.int64)
        self.position[self.nodes] = np.arange(self.nodes.size)  # where each target is
        self.price = np.zeros(self.nodes.size)
        self.owner = np.full(self.nodes.size, -1)  # source number
        self.owner_part = np.full(self.nodes.size, -1)
        self.owner_row = np.full(self.nodes.size, -1)  # its row in its part's Bidders

    def resolve(self, *bids: Bids) -> list[Outcome]:
        """Each target goes to its highest bidder (ties: the lowest source number), unseating
        its holder. ``bids``: each part's :meth:`Bidders.bid` for these targets; returns,
        per part: which of its bids won, its sources unseated, and the new prices."""
        t = self.position[np.concatenate([b[0] for b in bids])]
        bid, source, row = (np.concatenate([b[i] for b in bids]) for i in (1, 2, 3))
        part = np.repeat(np.arange(len(bids)), [b[0].size for b in bids])
        top = np.full(self.price.size, -np.inf)
        np.maximum.at(top, t, bid)
        high = bid == top[t]
        first = np.full(self.owner.size, np.iinfo(np.int64).max)
        np.minimum.at(first, t[high], source[high])
        won = high & (source == first[t])
        w = t[won]
        held = self.owner[w] >= 0
        unseated_part, unseated_row = self.owner_part[w][held], self.owner_row[w][held]
        self.owner[w], self.owner_part[w], self.owner_row[w] = source[won], part[won], row[won]
        self.price[w] = bid[won]
        sold = (self.nodes[w], bid[won])
        return [(won[part == p], unseated_row[unseated_part == p], *sold)
                for p in range(len(bids))]


def one_to_one(c: Candidates, num_targets: int, *, dense_scores: torch.Tensor | None = None,
               method: str = "auto") -> torch.Tensor:
    """One-to-one decoding: ``[n_s]`` int64 target per source, ``-1`` = unmatched.

    ``hungarian`` solves ``dense_scores`` (``[n_s, num_targets]``) exactly; ``sparse`` runs
    :func:`sparse_one_to_one` on the candidates; ``sinkhorn`` runs it on the
    :func:`sinkhorn_sparse` log-probabilities; ``auto`` is ``hungarian`` when
    ``dense_scores`` is given, else ``sparse``.
    """
    if method not in ONE_TO_ONE_METHODS:
        raise ValueError(f"unknown one-to-one method {method!r}; choose one of "
                         f"{ONE_TO_ONE_METHODS}")
    if method == "hungarian" or (method == "auto" and dense_scores is not None):
        if dense_scores is None:
            raise ValueError("method 'hungarian' needs dense_scores")
        if tuple(dense_scores.shape) != (c.index.size(0), num_targets):
            raise ValueError(f"dense_scores has shape {tuple(dense_scores.shape)}, expected "
                             f"{(c.index.size(0), num_targets)}")
        return hungarian(dense_scores)
    if method == "sinkhorn":
        c = sinkhorn_sparse(c, num_targets)
    return sparse_one_to_one(c, num_targets)


def _normalise_rows(log_p: torch.Tensor) -> torch.Tensor:
    """``log_p`` minus its row logsumexp; an all ``-inf`` row stays ``-inf``."""
    lse = torch.logsumexp(log_p, dim=1, keepdim=True)
    return log_p - lse.masked_fill(lse == -torch.inf, 0.0)


def _check_sinkhorn(tau: float, iters: int) -> None:
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")


def _check_targets(c: Candidates, num_targets: int) -> None:
    if c.index.numel() and (int(c.index.min()) < -1 or int(c.index.max()) >= num_targets):
        raise ValueError(f"candidate targets must lie in [0, {num_targets}) or be -1 padding")


def _check_no_repeats(index: torch.Tensor, edge: torch.Tensor) -> None:
    ordered = index.masked_fill(~edge, -1).sort(dim=1).values
    if ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any():
        raise ValueError("a candidate list names the same target twice")


def dense_assignment(cfg: AssignConfig, rows: int, targets: int) -> bool:
    """Whether ``one-to-one`` decoding runs the dense Hungarian on these sizes: asked for, or
    with ``auto`` when the matrix has at most ``dense_max_nodes ** 2`` cells (by its size, not
    its longer side: 10,000 sources x 10 targets is a small matrix, and the sparse auction
    on it ran for minutes)."""
    return cfg.method == "one-to-one" and (
        cfg.one_to_one == "hungarian"
        or cfg.one_to_one == "auto" and rows * targets <= cfg.dense_max_nodes ** 2)


def decode(scored: Scored, ac: AssignConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoded target of every output row (``-1`` when it gets none) and its score."""
    rows, forward = scored.rows, scored.forward
    c = forward.take_rows(rows)
    if ac.method == "argmax":
        return argmax(c), c.scores[:, 0]
    if ac.method == "mutual":
        best = mutual(forward, scored.backward)
        return best[rows], c.scores[:, 0]
    # a refined pair is decoded on its decoding scores, its matches scored by probability
    d = (decoding(c, scored.o_s[rows], scored.o_t, ac.score_weight / scored.scale)
         if scored.refined and ac.score_weight else c)
    if dense_assignment(ac, rows.numel(), scored.targets.size):
        cols = torch.from_numpy(scored.targets)
        need = rows.numel() * scored.num_targets * 12  # float32 scores + float64 costs
        if need > DENSE_MAX_BYTES:
            raise InputError(
                f"assign.one_to_one = 'hungarian' needs a dense {rows.numel()} x "
                f"{scored.num_targets} matrix ({need / 2**30:.1f} GiB, limit "
                f"{DENSE_MAX_BYTES / 2**30:.1f} GiB = a quarter of this machine's memory); "
                "use assign.one_to_one = 'sparse', which assigns over the top-k candidates")
        if scored.refined:  # refined scores exist on the candidates only; elsewhere they are 0
            dense = torch.zeros(rows.numel(), scored.num_targets)
            valid = d.index >= 0
            r = torch.arange(rows.numel())[:, None].expand_as(d.index)
            dense[r[valid], d.index[valid]] = d.scores[valid]
            dense = dense[:, cols]
        else:
            dense = scored.o_s[rows] @ scored.o_t[cols].T
        picked = hungarian(dense, max_bytes=DENSE_MAX_BYTES)  # checked above
        matched = torch.where(picked >= 0, cols[picked.clamp(min=0)], -1)
        if not scored.refined:
            return matched, dense.gather(1, picked.clamp(min=0)[:, None]).squeeze(1)
        listed = listed_score(c, matched)  # off its list a match's probability is 0
        return matched, torch.where((matched >= 0) & (listed == -torch.inf), 0.0, listed)
    matched = one_to_one(d, scored.num_targets,
                         method="sinkhorn" if ac.one_to_one == "sinkhorn" else "sparse")
    return matched, listed_score(c, matched)


def listed_score(c: Candidates, matched: torch.Tensor) -> torch.Tensor:
    """``[n]`` each row's score at its decoded target ``matched``, ``-inf`` where that is
    not in its list (or the row is unmatched)."""
    return torch.where(c.index == matched[:, None], c.scores, -torch.inf).max(1).values


POLISH_MAX_NODES = 2_000  # FAQ holds a dense n x n iterate and a LAP on it per step
# FAQ steps: on yeast at 20-25 % noise (3 runs each) 10 steps gained what 30 did (+3.3, +6.1)
POLISH_STEPS = 10
# Rounds of pair swaps (two_opt): on yeast they end by themselves after a few; this only
# bounds a pathological input.
SWAP_ROUNDS = 100
# two_opt's C = A B[m] holds up to sum_i deg_A(i) deg_B(m_i) entries (12 bytes each): 0.3-2.9
# million on development pairs of 12,000-19,000 nodes; hubs matched to hubs can make it
# quadratic, so beyond this the swaps are left out.
SWAP_CELLS = 30_000_000


def polish(matched: torch.Tensor, rows: torch.Tensor, source: Graph, target: Graph,
           fixed: tuple[np.ndarray, np.ndarray] | None = None,
           steps: int = POLISH_STEPS) -> torch.Tensor:
    """The one-to-one matching ``matched`` (targets of ``rows``) moved to keep more edges.

    Graph matching as the quadratic assignment problem :math:`\\max_P \\operatorname{tr}(A_s P
    A_t P^\\top)` over permutations (the edges both graphs keep under the matching), solved
    approximately by FAQ (Vogelstein et al., 2015: Frank-Wolfe on the doubly stochastic
    relaxation, projected by a LAP), :func:`faq`, then by swapping the targets of pairs of
    sources while that keeps more edges, :func:`two_opt`. It starts from
    the decoded matching (mixed with a tenth of the barycentre, so that the first step can
    leave it) and keeps the ``fixed`` pairs (seeds) in place; the smaller graph is padded
    with isolated nodes. Scores decide the start, the edges the end: on yeast at 5-25 %
    noise it lifts node correctness by 0.4 / 1.1 / 3.4 / 7.5 / 13.8 points (10 runs each).
    It never reads features, so it suits featureless graphs only: on a yeast copy whose
    nodes carry bags of words it took one-to-one accuracy from 93.6 to 61.6. FAQ is dense,
    ``O(n^2)`` memory, so pairs of more than :data:`POLISH_MAX_NODES` nodes get the swaps
    alone (sparse): on a copy of DBP15k zh's 19,233-node structure (5 % of the edges
    dropped, no seeds) they lifted one-to-one accuracy from 77.9 to 88.2, and from 88.8 to
    90.4 after bootstrapping. Returns ``[len(rows)]`` targets, ``-1`` where a row lands on
    padding.
    """
    n_s, n_t = source.num_nodes, target.num_nodes
    n = max(n_s, n_t)
    a_s, a_t = (_adjacency(g.edge_index.numpy(), n) for g in (source, target))
    seeds = (np.empty((0, 2), dtype=np.int64) if fixed is None else
             np.stack([np.asarray(fixed[0]), np.asarray(fixed[1])], 1).astype(np.int64))
    free_s = np.setdiff1d(np.arange(n), seeds[:, 0])
    if free_s.size < 2:
        return matched
    start = np.full(n, -1)
    start[rows.numpy()] = matched.numpy()
    start[np.isin(start, seeds[:, 1])] = -1
    start[seeds[:, 0]] = seeds[:, 1]
    taken = np.zeros(n, dtype=bool)
    taken[start[start >= 0]] = True
    open_s = np.flatnonzero(start < 0)
    start[open_s] = np.flatnonzero(~taken)[:open_s.size]  # the rest, in order
    if n <= POLISH_MAX_NODES:
        free_t = np.setdiff1d(np.arange(n), seeds[:, 1])
        column = np.full(n, -1)
        column[free_t] = np.arange(free_t.size)
        p0 = np.full((free_s.size, free_t.size), 0.1 / free_s.size)
        p0[np.arange(free_s.size), column[start[free_s]]] += 0.9
        start = faq(a_s, a_t, p0, seeds, steps)
    matching = two_opt(a_s, a_t, start, seeds[:, 0])
    picked = torch.from_numpy(matching[rows.numpy()].astype(np.int64))
    return torch.where(picked < n_t, picked, -1)


def two_opt(a: sp.csr_matrix, b: sp.csr_matrix, matching: np.ndarray, fixed: np.ndarray,
            rounds: int = SWAP_ROUNDS) -> np.ndarray:
    """``matching`` (the target of every row, a permutation) with the targets of pairs of
    rows swapped while that keeps more edges, the rows ``fixed`` left in place.

    FAQ ends where no *linear* step improves; a swap is judged on the edges themselves.
    With :math:`C = A B_{m,:}` (:math:`C_{it}`: neighbours of :math:`i` whose targets are
    adjacent to :math:`t`), swapping the targets of :math:`i` and :math:`j` changes the
    edges kept by

    .. math::
        \\Delta_{ij} = C_{i m_j} + C_{j m_i} - C_{i m_i} - C_{j m_j}
                       + 2 A_{ij} B_{m_i m_j},

    which can be positive only where :math:`C_{i m_j} + C_{j m_i} > 0`: a sparse set. Each
    round makes the best swaps greedily, none touching the rows or neighbours of another
    (so their gains add up), until none gains. On yeast at 5-25 % noise (10 runs each)
    FAQ's matchings kept 15-170 fewer edges than the gold's; the swaps lifted node
    correctness by 0.3 / 0.3 / 0.2 / 0.7 / 0.7 points for 0.04 s. ``a``, ``b``: symmetric
    0/1 ``[n, n]``."""
    m = matching.copy()
    cells = int((np.diff(a.indptr) * np.diff(b.indptr)[m]).sum())
    if cells > SWAP_CELLS:
        log.info("polish: no pair swaps (their sparse products would hold %d entries, more "
                 "than %d)", cells, SWAP_CELLS)
        return m
    free = np.ones(m.size, dtype=bool)
    free[fixed] = False
    for _ in range(rounds):
        c = (a @ b[m]).tocsr()
        cm = c[:, m].tocsr()  # cm[i, j] = C[i, m_j]
        kept = cm.diagonal()
        near = sp.triu(cm + cm.T, k=1).tocoo()
        i, j = near.row, near.col
        gain = (near.data - kept[i] - kept[j]
                + 2 * np.asarray(a[i, j]).ravel() * np.asarray(b[m[i], m[j]]).ravel())
        good = np.flatnonzero((gain > 0) & free[i] & free[j])
        if not good.size:
            break
        open_ = free.copy()
        for e in good[np.lexsort((j[good], i[good], -gain[good]))]:  # best first, then by row
            x, y = i[e], j[e]
            if open_[x] and open_[y]:
                m[x], m[y] = m[y], m[x]
                for row in (x, y):
                    open_[a.indices[a.indptr[row]:a.indptr[row + 1]]] = False
                open_[[x, y]] = False
    return m


def edges_kept(matched: torch.Tensor, rows: torch.Tensor, source: Graph, target: Graph) -> int:
    """How many of ``source``'s edges the matching (``matched`` targets of ``rows``, -1 for
    none) maps onto ``target``'s: the objective :func:`polish` raises, here a measure."""
    n = max(source.num_nodes, target.num_nodes)
    a_s, a_t = (_adjacency(g.edge_index.numpy(), n) for g in (source, target))
    full = np.full(n, -1)
    full[rows.numpy()] = matched.numpy()
    edge = sp.triu(a_s).tocoo()
    u, v = full[edge.row], full[edge.col]
    both = (u >= 0) & (v >= 0)
    return int(a_t[u[both], v[both]].sum())


def _adjacency(edge_index: np.ndarray, n: int) -> sp.csr_matrix:
    """The 0/1 symmetric adjacency of ``edge_index`` padded to ``n`` nodes, without
    self-loops (a node kept by the matching is not an edge kept)."""
    u, v = edge_index
    keep = u != v
    a = sp.coo_matrix((np.ones(int(keep.sum())), (u[keep], v[keep])), shape=(n, n)).tocsr()
    return (a + a.T).minimum(1.0).tocsr()


def _minus(dense: np.ndarray, sparse: sp.csr_matrix) -> np.ndarray:
    """``dense - sparse`` as a new dense array, without densifying ``sparse``: 0.66 ms
    against scipy's 4.5 ms (``np.asarray(dense - sparse)``) on a 1,004 x 1,004 iterate,
    three a step of :func:`faq`."""
    out, coo = dense.copy(), sparse.tocoo()
    out[coo.row, coo.col] -= coo.data
    return out


def faq(a: sp.csr_matrix, b: sp.csr_matrix, p0: np.ndarray, seeds: np.ndarray, steps: int,
        tol: float = 0.03) -> np.ndarray:
    """``scipy.optimize.quadratic_assignment(a, b, method="faq", options={"P0": p0,
    "partial_match": seeds, "maximize": True, "maxiter": steps, "tol": tol}).col_ind``,
    its steps with the adjacency matrices sparse: scipy multiplies them dense, four
    n x n x n products a step (yeast at 25 % noise: 1.36 s of a 2.9 s run, 0.25 s here).
    The same matching where the gradients do not tie (tested); where they do, the sums'
    other order can break a tie otherwise (yeast, 10 runs per noise level: node correctness
    within 0.6 points of scipy's, either way).

    ``a``, ``b``: symmetric ``[n, n]``; ``seeds``: ``[m, 2]`` fixed pairs; ``p0``: the
    doubly stochastic start over the other rows and columns, in increasing order. Returns
    the column of every row."""
    n, m = a.shape[0], len(seeds)
    perm_a = np.concatenate([seeds[:, 0], np.setdiff1d(np.arange(n), seeds[:, 0])])
    perm_b = np.concatenate([seeds[:, 1], np.setdiff1d(np.arange(n), seeds[:, 1])])
    a, b = a[perm_a][:, perm_a], b[perm_b][:, perm_b]
    a21, a22 = a[m:, :m], a[m:, m:].tocsr()
    b21, b22 = b[m:, :m], b[m:, m:].tocsr()
    # a and b are symmetric, so scipy's a21 b21' + a12' b12, A22 P B22' + A22' P B22 and the
    # step's two seed terms are each twice one term: half the sparse products of a step
    # (yeast at 20 % noise: they were 0.42 s of a 0.61 s polish). The step's two A22-B22
    # terms are equal too, but computed apart: summed in another order, their double moved
    # one yeast run by a node.
    const = 2 * (a21 @ b21.T).toarray()
    # Every product below is linear in the iterate, and the iterate moves to a mix of itself
    # and a permutation q, whose products are the sparse matrices with permuted columns: so
    # a22 p, b22 p' and a21' p are carried along, not multiplied anew (four sparse-dense
    # products a step became one: the polish of a yeast run at 25 % noise 0.49 -> 0.32 s).
    p = p0.copy()
    a12 = a21.T.tocsr()
    ap, bp, a21p = a22 @ p, b22 @ p.T, a12 @ p
    arange = np.arange(n - m)
    for _ in range(steps):
        grad = const + 2 * (a22 @ bp.T)
        _, cols = linear_sum_assignment(grad, maximize=True)
        inverse = np.argsort(cols)
        ar22 = _minus(ap, a22[:, inverse])  # a22 (p - q)
        br22 = _minus(bp, b22[:, cols])  # b22 (p - q)'
        a21r = _minus(a21p, a12[:, inverse])
        # the objective along p + x (q - p) is a x^2 + b x + c (scipy's expansion)
        lin = (2 * b21.multiply(a21r.T).sum() + b22[cols].multiply(ar22).sum()
               + a22.multiply(br22[cols]).sum())
        quad = (ar22.T * br22).sum()
        if quad < 0 and 0 <= -lin / (2 * quad) <= 1:
            alpha = -lin / (2 * quad)
        else:
            alpha = float(np.argmin([0, -(lin + quad)]))
        step = (1 - alpha) * np.sqrt(max(0.0, (p * p).sum() - 2 * p[arange, cols].sum()
                                         + (n - m)))
        p *= alpha
        p[arange, cols] += 1 - alpha
        for carried, moved in ((ap, ar22), (bp, br22), (a21p, a21r)):
            moved *= 1 - alpha
            carried -= moved
        if step / np.sqrt(n - m) < tol:
            break
    _, col = linear_sum_assignment(p, maximize=True)
    out = np.zeros(n, dtype=np.int64)
    out[perm_a] = perm_b[np.concatenate([np.arange(m), col + m])]
    return out
