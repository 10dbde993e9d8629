"""tfgm-dist: graph matching with training-free graph neural networks, as a batch job.

The stages of a run, one module each: :mod:`~tfgm_dist.load`, :mod:`~tfgm_dist.features`,
:mod:`~tfgm_dist.embed`, :mod:`~tfgm_dist.search`, :mod:`~tfgm_dist.refine`,
:mod:`~tfgm_dist.assign` and :mod:`~tfgm_dist.write`; :mod:`~tfgm_dist.pipeline` chains them.
:func:`tfgm_dist.align` runs the whole job in this process and returns the matches.
"""
__version__ = "0.1.0"


def __getattr__(name: str):
    """``tfgm_dist.align`` and ``tfgm_dist.Alignment`` (:mod:`tfgm_dist.api`), imported on
    first use so that ``import tfgm_dist`` stays light (the command line imports it first)."""
    if name in ("align", "Alignment"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'tfgm_dist' has no attribute {name!r}")
