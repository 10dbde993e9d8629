"""Ray job entrypoints and benchmark commands of tfgm-dist."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def warn_uncompiled() -> None:
    """Print a warning under a benchmark's header when every process it starts compiles its
    imports anew: where ``PYTHONDONTWRITEBYTECODE`` is set and the packages were installed
    without their bytecode (``pip install --no-compile``), each ``tfgm-dist`` process compiled
    torch, scipy and the rest again: 1.9 s of a 24.6 s run of a yeast copy (cProfile), about
    2 s of every end-to-end timing. ``pip install`` compiles them by default."""
    import torch
    if not sys.flags.dont_write_bytecode or Path(
            importlib.util.cache_from_source(torch.__file__)).exists():
        return
    print("warning: the installed packages hold no bytecode and PYTHONDONTWRITEBYTECODE is "
          "set, so every process started compiles its imports (about 2 s of each timing); "
          f"`{sys.executable} -m compileall -q -j 0 {Path(torch.__file__).parents[1]}` "
          "compiles them once", flush=True)
