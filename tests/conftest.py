"""What the tests share: one real Ray cluster for the whole session (starting one takes
about 10 s on this machine; the modules that need it used to start their own), and a cache
of sentence vectors of their own."""
import pytest


@pytest.fixture(scope="session")
def cluster():
    """A real Ray cluster started in this process, as the command line starts it. Ray is
    imported here, not above, so that the modules that need no cluster run where Ray is
    missing (the GPU tests on a machine lent without it)."""
    import ray

    from tfgm_dist.distributed import connect
    connect()
    yield
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def sentence_vector_cache(tmp_path_factory):
    """Sentence vectors cached in the session's temporary folder, not the user's home; set
    before the cluster starts, so that its workers inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFGM_CACHE", str(tmp_path_factory.mktemp("sentence-vectors")))
        yield
