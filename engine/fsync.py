"""fsync whose failure is final (the "fsyncgate" lesson).

After a failed fsync the kernel may have dropped the dirty pages it could not write and marked
them clean: a second fsync then reports success for data that is not on disk. So a failure is
never retried and acknowledged; the log whose file it was goes offline (`engine.log`).
"""

from __future__ import annotations

import os


class FileStateUnknown(OSError):
    """What a file holds is unknown after this failure: an fsync failed, or a failed append
    could not be cut back. Never retried: the log goes offline, whatever the errno."""


def checked_fsync(fd: int, path: str | os.PathLike[str]) -> None:
    """os.fsync of `fd` (the file at `path`); its failure, ENOSPC included, is a
    FileStateUnknown."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise FileStateUnknown(
            exc.errno, f"fsync of {os.fspath(path)} failed: {exc.strerror}"
        ) from exc
