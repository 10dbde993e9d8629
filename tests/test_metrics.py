import numpy as np
import pytest
import torch

from tfgm_dist.metrics import accuracy, ranking_metrics
from tfgm_dist.search import Candidates

INF = float("inf")

C = Candidates(torch.tensor([[0.9, 0.8, 0.7], [0.6, 0.6, 0.1], [0.5, -INF, -INF]]),
               torch.tensor([[3, 1, 2], [0, 2, 1], [4, -1, -1]]))
# (0,3) rank 1; (0,1) rank 2; (1,0) listed first but tied with t2: rank 2; (2,0) not listed
GOLD_S, GOLD_T = np.array([0, 0, 1, 2]), np.array([3, 1, 0, 0])


def test_ranking_metrics_hand_example():
    out = ranking_metrics(C, GOLD_S, GOLD_T, ks=(1, 2, 10))
    assert out == {"hits@1": 0.25, "hits@2": 0.75, "hits@10": 0.75,
                   "mrr": pytest.approx((1 + 1 / 2 + 1 / 2 + 0) / 4), "evaluated": 4}


def test_the_decoded_match_ranks_first_as_the_output_writes_it():
    """Row 0 decoded to its second candidate, row 1 to the gold's tie partner, row 2 left
    without a match: the lists as written are [1, 3, 2], [2, 0, 1] and none."""
    out = ranking_metrics(C, GOLD_S, GOLD_T, ks=(1, 2, 10), first=torch.tensor([1, 2, -1]))
    # (0,3) now rank 2, (0,1) rank 1, (1,0) rank 2 behind the decoded 2, (2,0) a miss
    assert out == {"hits@1": 0.25, "hits@2": 0.75, "hits@10": 0.75,
                   "mrr": pytest.approx((1 / 2 + 1 + 1 / 2 + 0) / 4), "evaluated": 4}
    # the decoded match counts even where the scores tie it with another
    tied = ranking_metrics(C, np.array([1]), np.array([0]), ks=(1,), first=torch.tensor([3, 0, 4]))
    assert tied["hits@1"] == 1.0
    assert ranking_metrics(C, np.array([1]), np.array([0]), ks=(1,))["hits@1"] == 0.0


def test_ranking_metrics_default_keys():
    assert set(ranking_metrics(C, GOLD_S, GOLD_T)) == {"hits@1", "hits@10", "mrr", "evaluated"}


def test_accuracy_counts_exact_matches_and_unmatched_as_wrong():
    assert accuracy(torch.tensor([3, 0, -1]), GOLD_S, GOLD_T) == 0.5


def test_gold_is_validated():
    with pytest.raises(ValueError, match="equal-length"):
        accuracy(torch.tensor([0]), np.array([0, 0]), np.array([0]))
    with pytest.raises(ValueError, match="no gold pairs"):
        ranking_metrics(C, np.array([], dtype=int), np.array([], dtype=int))
    with pytest.raises(ValueError, match=r"lie in \[0, 3\)"):
        ranking_metrics(C, np.array([3]), np.array([0]))
    with pytest.raises(ValueError, match="ks must be >= 1"):
        ranking_metrics(C, GOLD_S, GOLD_T, ks=(0,))
