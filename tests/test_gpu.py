"""The GPU code path of one process: the same run on a CUDA GPU as on the CPU. What needs a
GPU is skipped where torch sees none, saying so; nothing here needs Ray (the part actors'
GPU placement is tested in test_distributed)."""
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from tfgm_dist.config import EmbedConfig, load_config, with_overrides
from tfgm_dist.embed import LayerParams, graph_operator, layer, whole
from tfgm_dist.errors import InputError
from tfgm_dist.job import run_job
from tfgm_dist.pipeline import device
from tfgm_dist.refine import refine
from tfgm_dist.search import Candidates, gpu_available, top_k
from tfgm_dist.synth import write_pair

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU; torch sees none on this host")
NEEDS_FAISS_GPU = pytest.mark.skipif(not gpu_available(),
                                     reason="needs faiss-gpu and a GPU; this host has faiss-cpu "
                                            "or no GPU")


def random_graph(n: int = 300, e: int = 1500, d: int = 16):
    gen = torch.Generator().manual_seed(0)
    edges = torch.randint(0, n, (2, e), generator=gen)
    return graph_operator(edges, n), torch.randn(n, d, generator=gen)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA GPU")
def test_asking_for_cuda_without_one_is_a_one_line_error():
    with pytest.raises(InputError, match="device = cuda, but torch sees no CUDA GPU"):
        device(with_overrides(load_config(None), device="cuda"))
    assert device(load_config(None)).type == "cpu"


@NEEDS_CUDA
def test_a_layer_on_cuda_equals_the_layer_on_cpu():
    op, x = random_graph()
    block = whole(op)
    params = LayerParams(torch.randn(16, 16), torch.randn(16))
    cpu = layer(block, x, params, relu=True)
    cuda = layer(block.to("cuda"), x.cuda(), params.to("cuda"), relu=True)
    torch.testing.assert_close(cuda.cpu(), cpu, atol=1e-5, rtol=1e-5)


@NEEDS_CUDA
def test_refinement_on_cuda_equals_refinement_on_cpu():
    """The same indicator draws on either device: the probabilities agree to float32's
    rounding of ten steps."""
    op, x = random_graph()
    block = whole(op)
    scores = x @ x.T
    c = Candidates.sorted(*scores.topk(10, dim=1))
    args = dict(steps=10, dim=32, psi=EmbedConfig(layers=1), scale=1.0, seed=3,
                fixed=(torch.arange(5), torch.arange(5)))
    cpu = refine(c, block, block, **args)
    cuda = refine(c, block, block, device="cuda", **args)
    torch.testing.assert_close(cuda.scores, cpu.scores, atol=1e-4, rtol=1e-4)
    assert (cuda.index[:, 0] == cpu.index[:, 0]).float().mean() >= 0.99


@NEEDS_CUDA
@pytest.mark.parametrize("seeded", [False, True])
def test_a_run_on_cuda_equals_the_run_on_the_cpu(tmp_path, seeded):
    """A whole run with no config (exact search, refinement, one-to-one) on the GPU: the
    embedding, the search and the refinement run there, and the result is the CPU's."""
    data = write_pair(tmp_path / "data", 3000, seed=2)
    keys = {"job.source": str(data["source"]), "job.target": str(data["target"]),
            "job.gold": str(data["gold"])}
    if seeded:
        keys["job.seeds"] = str(tmp_path / "seeds.parquet")
        pq.write_table(pq.read_table(data["gold"]).slice(0, 300), keys["job.seeds"])
    cfg = with_overrides(load_config(None), **keys)
    on = {d: run_job(with_overrides(cfg, **{"job.out": str(tmp_path / d), "device": d}))
          for d in ("cpu", "cuda")}
    assert on["cuda"]["accuracy"] == pytest.approx(on["cpu"]["accuracy"], abs=0.002)
    assert on["cuda"]["auto"]["chosen"]["refine.enabled"]
    assert on["cuda"]["peak_gpu_bytes"] > 0


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
