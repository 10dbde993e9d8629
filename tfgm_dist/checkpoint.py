"""Resume: a run's decided matches, kept beside its output until the output is committed.

A run that dies after the assign stage (the driver killed during the write, a lost node)
leaves ``.OUT.resume-<key>/`` behind. The same job run again (same config and input bytes:
the key) finds it and goes straight to the write stage, which its stage timings show as
``resume``. The folder is removed once the output is committed; it holds plain ``.npz``
arrays (read without pickle) and ``metrics.json``, written last, which marks it complete.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import torch

from .pipeline import Result
from .search import Candidates
from .write import Location

DONE = "metrics.json"


def run_key(about: dict[str, Any]) -> str:
    """What makes two runs the same job: the config (but ``overwrite`` and the Ray address)
    and the bytes of every input."""
    config = copy.deepcopy(about["config"])
    config["job"].pop("overwrite")
    config["ray"].pop("address")
    inputs = {name: fp["sha256"] for name, fp in about["inputs"].items()}
    text = json.dumps({"config": config, "inputs": inputs}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def location(out: Location, key: str) -> Location:
    return out.parent / f".{out.name}.resume-{key}"


def save_piece(folder: Location, q: int, piece: Result) -> None:
    """Keep part ``q`` of a result (its rows, candidates, decoded matches and confidence)."""
    buf = io.BytesIO()
    np.savez(buf, rows=piece.rows.numpy(), scores=piece.candidates.scores.numpy(),
             index=piece.candidates.index.numpy(), matched=piece.matched.numpy(),
             matched_score=piece.matched_score.numpy(),
             confidence=(torch.full_like(piece.matched_score, torch.nan)
                         if piece.confidence is None else piece.confidence).numpy())
    folder.fs.create_dir(folder.path, recursive=True)
    with folder.fs.open_output_stream((folder / f"piece-{q:05d}.npz").path) as f:
        f.write(buf.getvalue())


def save_done(folder: Location, metrics: dict[str, Any], parts: int) -> None:
    """Mark the saved pieces complete: written after every piece."""
    (folder / DONE).write_text(json.dumps({"parts": parts, "metrics": metrics}))


def load(folder: Location) -> tuple[dict[str, Any], int] | None:
    """The metrics and the number of pieces of a complete checkpoint, else ``None``."""
    if (folder / DONE).info().type != pafs.FileType.File:
        return None
    with folder.fs.open_input_stream((folder / DONE).path) as f:
        done = json.loads(f.read())
    return done["metrics"], done["parts"]


def load_piece(folder: Location, q: int) -> Result:
    with folder.fs.open_input_stream((folder / f"piece-{q:05d}.npz").path) as f:
        arrays = np.load(io.BytesIO(f.read()), allow_pickle=False)
        t = {name: torch.from_numpy(arrays[name]) for name in arrays.files}
    return Result(t["rows"], Candidates(t["scores"], t["index"]), t["matched"],
                  t["matched_score"], confidence=t["confidence"])


def discard(folder: Location) -> None:
    if folder.info().type != pafs.FileType.NotFound:
        folder.fs.delete_dir(folder.path)
