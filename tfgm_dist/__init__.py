"""tfgm-dist: graph matching with training-free graph neural networks, as a batch job.

The stages of a run, one module each: :mod:`~tfgm_dist.load`, :mod:`~tfgm_dist.features`,
:mod:`~tfgm_dist.embed`, :mod:`~tfgm_dist.search`, :mod:`~tfgm_dist.refine`,
:mod:`~tfgm_dist.assign` and :mod:`~tfgm_dist.write`; :mod:`~tfgm_dist.pipeline` chains them.
"""
__version__ = "0.1.0"
