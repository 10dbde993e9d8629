"""Remote inputs: any pyarrow filesystem URI copied to a local folder before loading."""
from __future__ import annotations

import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError, one_line


def fetch(uri: str, folder: str | Path) -> Path:
    """A local path for an input given as a path or a pyarrow filesystem URI.

    Remote files and folders (``s3://``, ``gs://``, ``hdfs://`` ...) are copied into
    ``folder`` first, so that every loader reads local files and names them in errors. A
    local input must be a regular file or a folder: a pipe or a device (``/dev/zero``) is
    refused, as it can be endless and cannot be read again for the fingerprint.
    """
    if "://" not in uri or uri.startswith("file://"):
        local = Path(uri.removeprefix("file://"))
        try:
            mode = local.stat().st_mode
        except FileNotFoundError:
            raise InputError(f"{local}: no such file or folder") from None
        except OSError as e:
            raise InputError(f"{local}: cannot read ({e.strerror})") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"{local}: not a regular file or folder (a pipe or device "
                             "cannot be read)")
        return local
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise InputError(f"{uri}: no such file or folder")
        local = Path(folder) / f"{len(list(Path(folder).iterdir()))}-{info.base_name}"
        pafs.copy_files(path, str(local), source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"{uri}: cannot read ({one_line(e)})") from None
    return local
