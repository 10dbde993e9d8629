"""What a run can say of its own accuracy, without gold: a held-out estimate and a confidence
per match.

- **Estimate.** With seeds, a run that knows only the kept seeds ranks the held-out ones
  (:func:`tfgm_dist.auto.split_seeds`, once per fold); the share it decodes right and its
  MRR (:func:`held_out`) estimate the accuracy of the real run, which knows every seed (so
  they err low). Without seeds, :func:`proxy` reports what the scores say of themselves.
- **Confidence.** A match's margin is its score minus the best other candidate's, over the
  largest possible score (:func:`margins`); the confidence is the probability that a match
  of that margin is right, fitted by isotonic regression (monotone in the margin) on the
  held-out seeds (:func:`calibrate`). Without seeds the labels are whether a match is its
  target's best source too, and the fit is squared (mutual is not right); an unmatched
  source has no confidence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from scipy.optimize import isotonic_regression

from . import metrics
from .pipeline import Result


def margins(result: Result) -> torch.Tensor:
    """``[n]`` each row's decoded score minus its best other candidate's, over
    ``result.scale``, in ``[-1, 1]``; NaN where nothing was decoded."""
    c, matched = result.candidates, result.matched
    others = c.scores.masked_fill((c.index == matched[:, None]) | (c.index < 0), -torch.inf)
    runner_up = others.max(1).values if c.k else torch.full_like(result.matched_score, -torch.inf)
    margin = ((result.matched_score - runner_up) / result.scale).clamp(-1.0, 1.0)
    return torch.where(matched >= 0, margin, torch.nan)


def held_out(results: list[Result], helds: list[tuple[np.ndarray, np.ndarray]]
             ) -> dict[str, Any]:
    """The estimate from the runs of the folds, each scored on its held-out seeds (its
    gold): Hits@1 is the share of held-out sources decoded to their target (what rank 1 of
    the output is), MRR that of the lists as written, both over every fold's held-out pairs;
    rates in ``[0, 1]``, with the standard error of Hits@1 and the number of folds."""
    sizes = np.array([held[0].size for held in helds], dtype=np.float64)
    n = int(sizes.sum())
    hits = float(sizes @ [r.metrics["accuracy"] for r in results]) / n
    mrr = float(sizes @ [r.metrics["mrr"] for r in results]) / n
    return {"hits@1": round(hits, 4), "mrr": round(mrr, 4), "held_out": n,
            "stderr": round(math.sqrt(hits * (1 - hits) / n), 4), "folds": len(results)}


def fitted(results: list[Result], helds: list[tuple[np.ndarray, np.ndarray]],
           told: list[Told | None] | None = None) -> Calibration:
    """The confidence fitted on the held-out rows of every fold's run (:func:`calibrate`),
    but those decoded to the hint their run was ``told`` (a fold's :class:`Told`): their
    margins say that they were told."""
    told = told or [None] * len(results)
    margin = torch.cat([margins(result)[torch.from_numpy(_held_rows(result, held, t))]
                        for result, held, t in zip(results, helds, told)])
    return calibrate(margin, held_out_right(results, helds, told), "held-out seeds")


def held_out_right(results: list[Result], helds: list[tuple[np.ndarray, np.ndarray]],
                   told: list[Told | None] | None = None) -> np.ndarray:
    """Whether each fold's run decodes each of its held-out sources (but those decoded to
    a hint it was ``told``) to its target, fold by fold in row order: the labels of the
    confidence's fit, and what the decodings are compared on
    (:func:`tfgm_dist.auto._decoding_of`)."""
    told = told or [None] * len(results)
    return np.concatenate([correct(result, held)[_held_rows(result, held, t)]
                           for result, held, t in zip(results, helds, told)])


def _held_rows(result: Result, held: tuple[np.ndarray, np.ndarray],
               told: Told | None = None) -> np.ndarray:
    """``[n]`` whether each row of ``result`` is a held-out source, not decoded to a hint
    it was ``told``."""
    rows = np.isin(result.rows.numpy(), held[0])
    return rows if told is None else rows & ~told.of(result)[0]


def correct(result: Result, held: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``[n]`` whether each row of ``result`` is decoded to its held-out target (rows whose
    source is not held out: False; leave them out of a fit)."""
    return metrics.gold_targets(result.rows.numpy(), *held) == result.matched.numpy()


@dataclass(frozen=True)
class Told:
    """Hints as a pass is told them: ``(source, target)`` numbers, and the confidence each
    match had in the pass that found it, before it was an anchor.

    A hinted source is anchored to its target, so a pass that is told it decodes it there
    with about the largest margin, right or not: the margin says it was told. On a yeast
    copy with seeds (keep 0.8, drop 0.25) the final pass's hinted rows were given 0.95 by
    their margins and were 80 % right (95 rows at >= 0.9), their confidence when found."""

    sources: np.ndarray  # [h]
    targets: np.ndarray  # [h]
    confidence: np.ndarray  # [h] in [0, 1]

    @property
    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sources, self.targets

    def of(self, result: Result) -> tuple[np.ndarray, np.ndarray]:
        """``[n]`` whether each row of ``result`` is decoded to the hint it was told, and
        ``[n]`` that hint's confidence there (NaN elsewhere)."""
        rows, n = result.rows.numpy(), result.rows.numel()
        if not self.sources.size:
            return np.zeros(n, dtype=bool), np.full(n, np.nan)
        order = np.argsort(self.sources, kind="stable")
        at = order[np.searchsorted(self.sources, rows, sorter=order).clip(max=order.size - 1)]
        hit = (self.sources[at] == rows) & (self.targets[at] == result.matched.numpy())
        return hit, np.where(hit, self.confidence[at], np.nan)


def told(result: Result, confidence: torch.Tensor, rows: np.ndarray) -> Told:
    """The matches of ``result``'s ``rows`` (a mask) as hints, with their ``confidence``."""
    return Told(result.rows.numpy()[rows], result.matched.numpy()[rows],
                confidence.numpy()[rows].astype(np.float64))


def confidence(result: Result, fit: Calibration, hints: Told | None = None) -> torch.Tensor:
    """``[n]`` each row's confidence: ``fit`` of its margin, or where it is decoded to the
    hint it was told, the confidence that hint had when found (:class:`Told`)."""
    out = fit(margins(result))
    if hints is not None:
        hit, was = hints.of(result)
        out[torch.from_numpy(hit)] = torch.from_numpy(was[hit]).float()
    return out


@dataclass(frozen=True)
class Calibration:
    """A non-decreasing step function from margin to confidence (isotonic regression)."""

    margin: np.ndarray  # [m] the distinct margins of the fitted points, increasing
    value: np.ndarray  # [m] fitted probability at each, non-decreasing
    fitted_on: str  # "held-out seeds" or "mutual best matches"
    power: int = 1  # the fitted probability raised to it (:func:`on_mutual`)

    def __call__(self, margin: torch.Tensor) -> torch.Tensor:
        """Confidence in ``[0, 1]`` of each margin; NaN margins stay NaN."""
        m = margin.numpy()
        if self.margin.size == 0:
            out = np.full(m.shape, np.nan)
        else:
            out = np.interp(np.nan_to_num(m, nan=0.0), self.margin, self.value)
        return torch.from_numpy(np.where(np.isnan(m), np.nan, out)).float() ** self.power


def calibrate(margin: torch.Tensor, label: np.ndarray, fitted_on: str) -> Calibration:
    """The isotonic fit of ``label`` (0/1) on ``margin``, each step's share shrunk by two
    pseudo-observations at :math:`p`, ``(right + 2 p) / (n + 2)``, and made monotone again;
    NaN margins are left out. :math:`p = \\min(1/2, \\bar p)`, :math:`\\bar p` the share
    right over all points (by Laplace's rule, so never 0).

    The shrinking matters where few points are held out: a top step of 7 right of 7 (a pair
    with 12 held-out seeds, most right) says 0.89, not 1.0, and a step of 300 right of 300
    still 0.997. On the yeast copies with 12 held-out seeds the unshrunk fit put rows at
    1.0 that were right 70-75 % of the time. Towards :math:`\\bar p` where it is below
    1/2, not to even odds (Laplace's rule): steps are shares of one population, and where
    few are right a lucky step must not say even odds; flickr_myspace's 4 held-out seeds,
    1 right, ended in a step of 1 right of 2, which Laplace's rule put at 0.5 (38 gold
    rows at >= 0.5, none right). Never above 1/2: towards DBP15k's 0.97 its low steps rose,
    more hints passed 0.8 and zh-en with seeds fell 97.5 -> 97.3.

    Equal margins are one point of the fit, weighted by how many they are: a row's
    confidence depends on its margin alone. Fitted one by one, the held-out seeds of a
    featureless flickr copy whose best and second target tie (margin 0, 53 of 72) fell into
    steps of 0.15, 0.3 and 0.5, and every output row with margin 0 got the last: 2,706 rows
    at 0.5 of which 26 % were right."""
    m = margin.numpy()
    keep = ~np.isnan(m)
    x, at, count = np.unique(m[keep], return_inverse=True, return_counts=True)
    if not x.size:
        return Calibration(x, np.empty(0), fitted_on)
    share = np.bincount(at, weights=label[keep].astype(np.float64)) / count
    steps = isotonic_regression(share, weights=count.astype(np.float64), increasing=True)
    size = steps.weights
    prior = min(0.5, (float(share @ count) + 1.0) / (count.sum() + 2.0))
    shrunk = (steps.x[steps.blocks[:-1]] * size + 2.0 * prior) / (size + 2.0)
    value = isotonic_regression(shrunk, weights=size, increasing=True).x
    return Calibration(x, np.clip(np.repeat(value, np.diff(steps.blocks)), 0.0, 1.0), fitted_on)


def proxy(mutual: np.ndarray | None, margin: torch.Tensor) -> dict[str, Any]:
    """Without seeds: the share of decoded matches that are their target's best source too
    (``mutual``, when both directions were searched) and the quartiles of the margin."""
    out: dict[str, Any] = {}
    if mutual is not None:
        out["mutual_best"] = round(float(mutual.astype(np.float64).mean()), 4)
    m = margin.numpy()
    m = m[~np.isnan(m)]
    if m.size:
        out["margin_quartiles"] = [round(float(v), 4) for v in np.quantile(m, [0.25, 0.5, 0.75])]
    return out


def on_mutual(margin: torch.Tensor, mutual: np.ndarray) -> Calibration:
    """The confidence a run without held-out seeds gives: the fit of being the target's best
    source too, squared (see the module's docstring).

    Being mutual overstates being right by the mutual-but-wrong share. Measured on yeast at
    25 % noise: rows the mutual fit put at >= 0.9 were right 78 % of the time; its square
    (still monotone, in [0, 1]) is the conservative reading."""
    return replace(calibrate(margin, mutual, "mutual best matches"), power=2)


def self_calibrated(result: Result, first: Result | None = None) -> Result:
    """``result`` with a confidence fitted on its own mutual best matches (:func:`on_mutual`)
    and the proxy in its metrics: what a run without held-out seeds can say.

    After bootstrapping (``first``: the pass whose mutual best matches became the hints,
    itself self-calibrated), a hinted row is its target's best source because it was made an
    anchor, so its mutuality says nothing: the fit leaves those rows out, and a row still
    decoded to its hint keeps the confidence ``first`` gave it (rows are the same in both
    passes). Carried from pass to pass, a hint's confidence is the one it had when a pass
    first found it without being told it. Refitted on each pass instead, on the yeast copy
    with 2 of 64 words (grown hints, 6 rounds) 293 of the 308 rows at >= 0.9 were hinted
    rows, 80.5 % right: each pass's mutuality was inflated by the hints of the pass before.
    """
    if result.mutual is None:
        return result
    margin, mutual = margins(result), result.mutual.numpy()
    hints = None
    if first is not None and first.mutual is not None:
        hints = told(first, first.confidence, first.mutual.numpy())
    hinted = np.zeros_like(mutual) if hints is None else hints.of(result)[0]
    fit = on_mutual(margin[~torch.from_numpy(hinted)], mutual[~hinted])
    result.metrics["estimate"] = {**proxy(mutual, margin), "confidence_fitted_on": fit.fitted_on}
    result.confidence = confidence(result, fit, hints)
    return result
