"""What the tests share: one real Ray cluster for the whole session (starting one takes
about 10 s on this machine; the modules that need it used to start their own)."""
import pytest
import ray

from tfgm_dist.distributed import connect


@pytest.fixture(scope="session")
def cluster():
    """A real Ray cluster started in this process, as the command line starts it."""
    connect()
    yield
    ray.shutdown()
