"""The GPU code path: what can run without a GPU runs here; what needs one is skipped, saying so."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from tfgm_dist.config import load_config, with_overrides
from tfgm_dist.distributed import RESTART_HEADROOM, placement
from tfgm_dist.embed import LayerParams, graph_operator, layer, whole
from tfgm_dist.job import run_job
from tfgm_dist.search import gpu_available, top_k
from tfgm_dist.synth import write_pair

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU; torch sees none on this host")
NEEDS_FAISS_GPU = pytest.mark.skipif(not gpu_available(),
                                     reason="needs faiss-gpu and a GPU; this host has faiss-cpu "
                                            "or no GPU")


def test_one_actor_per_gpu_with_its_tensors_on_cuda():
    device, threads, options = placement(16, 4, 4)
    assert device == "cuda" and threads == 4
    assert options["num_gpus"] == 1 and options["num_cpus"] == 0
    assert placement(16, 4, 8)[2]["num_gpus"] == 0.5  # two parts share each GPU


def test_cpu_actors_run_their_share_of_cores_and_reserve_half():
    device, threads, options = placement(8, 0, 2)
    assert device == "cpu" and threads == 4
    assert options["num_cpus"] == 4 * RESTART_HEADROOM and "num_gpus" not in options
    assert options["scheduling_strategy"] == "SPREAD"


def random_graph(n: int = 300, e: int = 1500, d: int = 16):
    gen = torch.Generator().manual_seed(0)
    edges = torch.randint(0, n, (2, e), generator=gen)
    return graph_operator(edges, n), torch.randn(n, d, generator=gen)


@NEEDS_CUDA
def test_a_layer_on_cuda_equals_the_layer_on_cpu():
    op, x = random_graph()
    block = whole(op)
    params = LayerParams(torch.randn(16, 16), torch.randn(16))
    cpu = layer(block, x, params, relu=True)
    cuda = layer(replace(block, adj=block.adj.cuda()), x.cuda(),
                 LayerParams(params.weight.cuda(), params.bias.cuda()), relu=True)
    torch.testing.assert_close(cuda.cpu(), cpu, atol=1e-5, rtol=1e-5)


@NEEDS_FAISS_GPU
@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfpq"])
def test_a_gpu_index_finds_what_the_cpu_index_finds(kind):
    rng = np.random.default_rng(0)
    x_t = rng.standard_normal((5000, 64)).astype(np.float32)
    x_s = (x_t + 0.3 * rng.standard_normal(x_t.shape)).astype(np.float32)
    cpu, _ = top_k(x_s, x_t, 5, kind=kind, use_gpu=False, recall=0.99)
    gpu, tuned = top_k(x_s, x_t, 5, kind=kind, use_gpu=True, recall=0.99)
    agree = (gpu.index[:, 0] == cpu.index[:, 0]).float().mean().item()
    assert agree >= (1.0 if kind == "flat" else 0.98)
    assert kind == "flat" or tuned["recall@1"] >= 0.99


@NEEDS_CUDA
@NEEDS_FAISS_GPU
def test_a_ray_run_on_the_gpu_equals_one_process_on_the_cpu(cluster, tmp_path):
    data = write_pair(tmp_path / "data", 3000, seed=2)
    cfg = with_overrides(load_config(None), **{"search.k": 10, "job.source": str(data["source"]),
                                               "job.target": str(data["target"]),
                                               "job.gold": str(data["gold"])})
    single = run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "single")}))
    on_gpu = run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "gpu"),
                                            "ray.partitions": 1}))
    assert on_gpu["ray"]["device"] == "cuda"
    assert on_gpu["accuracy"] == pytest.approx(single["accuracy"], abs=0.001)
