"""tfgm-dist: graph matching with training-free graph neural networks, as a batch job.

The stages of a run, one module each: :mod:`~tfgm_dist.load`, :mod:`~tfgm_dist.features`,
:mod:`~tfgm_dist.embed`, :mod:`~tfgm_dist.search`, :mod:`~tfgm_dist.refine`,
:mod:`~tfgm_dist.assign` and :mod:`~tfgm_dist.write`; :mod:`~tfgm_dist.pipeline` chains them.
"""
import warnings

__version__ = "0.1.0"

# torch warns on every sparse CSR tensor it builds; the project builds them on purpose.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
