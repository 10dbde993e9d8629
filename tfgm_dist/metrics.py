"""Evaluation against gold pairs ``(gold_src[g], gold_tgt[g])`` of node numbers.

Every gold pair counts once (a source with several gold targets is evaluated once per
pair). Vectorised over the pairs: no Python loop over rows.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .search import Candidates


def ranking_metrics(c: Candidates, gold_src: np.ndarray, gold_tgt: np.ndarray,
                    ks: Sequence[int] = (1, 10), first: torch.Tensor | None = None) -> dict:
    """Hits@k and MRR of the gold targets in the candidate lists, rates in [0, 1].

    The rank of gold pair ``(s, t)`` is pessimistic on ties:
    ``rank = 1 + #{j : score_sj > score_st} + #{other j : score_sj = score_st}``, i.e. the
    number of listed candidates scoring at least as high as the gold, so equal scores never
    earn credit. A gold target missing from the list has rank infinity (a miss, ``1/rank = 0``).
    The lists hold the top ``K = c.k`` only, so MRR is MRR@K and Hits@k for ``k > K`` equals
    Hits@K.

    ``first``: ``[n]`` each row's decoded target, ranked first whatever its score, the other
    candidates after it as above: the lists as the output writes them
    (:func:`tfgm_dist.write.match_table`), so that Hits@1 is the share of gold sources whose
    written match is right. ``-1``: the decoding left the row without a match, and the
    output without a list (a miss).

    Returns ``{"hits@k": ... for k in ks, "mrr": float, "evaluated": number of gold pairs}``.
    """
    if any(k < 1 for k in ks):
        raise ValueError(f"every k in ks must be >= 1, got {tuple(ks)}")
    src, tgt = _gold(gold_src, gold_tgt, c.index.size(0))
    scores, index = c.scores[src], c.index[src]
    decoded = None if first is None else first[src]
    if decoded is not None:
        index = index.masked_fill(index == decoded[:, None], -1)
    hit = index == tgt[:, None]
    gold_score = scores.masked_fill(~hit, -torch.inf).max(dim=1, keepdim=True).values
    at_least = ((scores >= gold_score) & (index >= 0)).sum(dim=1).double()
    rank = torch.where(hit.any(dim=1), at_least, torch.inf)
    if decoded is not None:
        rank = torch.where(decoded == tgt, 1.0, torch.where(decoded >= 0, rank + 1, torch.inf))
    out = {f"hits@{k}": (rank <= k).double().mean().item() for k in ks}
    out["mrr"] = rank.reciprocal().mean().item()
    out["evaluated"] = src.numel()
    return out


def accuracy(assigned: torch.Tensor, gold_src: np.ndarray, gold_tgt: np.ndarray) -> float:
    """Share (in [0, 1]) of gold pairs ``(s, t)`` with ``assigned[s] == t``.

    ``assigned`` is ``[n_s]`` target numbers, ``-1`` for unmatched sources (always wrong).
    """
    if assigned.dim() != 1:
        raise ValueError(f"assigned must be a [n_s] vector, got shape {tuple(assigned.shape)}")
    src, tgt = _gold(gold_src, gold_tgt, assigned.numel())
    return (assigned[src] == tgt).double().mean().item()


def _gold(gold_src: np.ndarray, gold_tgt: np.ndarray,
          num_sources: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gold pairs as int64 tensors, checked: equal 1-D lengths, non-empty, in range."""
    src = torch.from_numpy(np.asarray(gold_src, dtype=np.int64))
    tgt = torch.from_numpy(np.asarray(gold_tgt, dtype=np.int64))
    if src.dim() != 1 or src.shape != tgt.shape:
        raise ValueError(f"gold_src {tuple(src.shape)} and gold_tgt {tuple(tgt.shape)} must "
                         f"be equal-length vectors")
    if src.numel() == 0:
        raise ValueError("no gold pairs to evaluate")
    if int(src.min()) < 0 or int(src.max()) >= num_sources:
        raise ValueError(f"gold sources must lie in [0, {num_sources})")
    if int(tgt.min()) < 0:
        raise ValueError("gold targets must be >= 0")
    return src, tgt


def gold_targets(rows: np.ndarray, gold_src: np.ndarray, gold_tgt: np.ndarray) -> np.ndarray:
    """``[n]`` the gold target of each source number in ``rows``, ``-2`` where it has none
    (never equal to a decoded target, not even ``-1``)."""
    truth = np.full(int(max(rows.max(initial=-1), gold_src.max(initial=-1))) + 1, -2)
    truth[gold_src] = gold_tgt
    return truth[rows]


def reliability(confidence: torch.Tensor, assigned: torch.Tensor, rows: torch.Tensor,
                gold_src: np.ndarray, gold_tgt: np.ndarray,
                levels: Sequence[float] = (0.5, 0.8, 0.9)) -> dict:
    """How far the confidence can be trusted: for each level ``c``, among the output rows
    with a gold pair and confidence >= ``c``, how many there are and the share (0-1) decoded
    right. A calibrated confidence has a share of at least about ``c``.

    ``confidence``, ``assigned``: ``[n]`` per output row, whose source numbers are ``rows``.
    """
    target = torch.from_numpy(gold_targets(rows.numpy(), gold_src, gold_tgt))
    scored = target >= 0
    out = {}
    for c in levels:
        sure = scored & (confidence >= c)  # NaN confidence is never >= c
        n = int(sure.sum())
        right = int((assigned[sure] == target[sure]).sum())
        out[f"{c:g}"] = _sure(n, right)
    return out


def _sure(rows: int, right: int) -> dict:
    return {"rows": rows, "right": right, "share_correct": round(right / rows, 4) if rows else None}


def combined(parts: list[dict]) -> dict:
    """One evaluation of the union of disjoint sets of rows from each set's: rates
    (:func:`ranking_metrics`, ``accuracy``) weighted by the gold pairs each evaluated, and
    :func:`reliability` counts summed (``"reliability"``, where the parts have it). A Ray
    run evaluates each part's rows where they are."""
    scored = [p for p in parts if p["evaluated"]]
    n = sum(p["evaluated"] for p in scored)
    out: dict = {"evaluated": n}
    for key in (k for k in scored[0] if k not in ("evaluated", "reliability")) if n else ():
        # hits and accuracy are counts over n: the sum of round(rate * n) is exact
        total = sum(p[key] * p["evaluated"] for p in scored)
        out[key] = total / n if key == "mrr" else round(total) / n
    sure = [p["reliability"] for p in parts if "reliability" in p]
    if sure:
        out["reliability"] = {c: _sure(sum(s[c]["rows"] for s in sure),
                                       sum(s[c]["right"] for s in sure)) for c in sure[0]}
    return out
