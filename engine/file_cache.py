"""A bounded, process-wide cache of open descriptors for the files of closed segments.

Only a partition's active segment keeps its file open for good. A closed segment's files (its
log and both indexes) are opened here on demand and pinned for the length of a read; past the
capacity the least recently used ones close, so a node's open files stay bounded by its
partitions plus the capacity, whatever the number of segments. A descriptor is never closed
under a reader: one evicted or forgotten while pinned closes at its last unpin.
"""

from __future__ import annotations

import io
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import StorageError

MAX_DEFAULT_CAPACITY = 1024


class FileGone(StorageError):
    """The file's segment deleted, replaced or closed it: it is never opened again."""


def default_capacity(soft_limit: int | None = None) -> int:
    """An eighth of the soft descriptor limit (this process's, or `soft_limit`), from 8 to
    1024: the partitions' active segments may take three quarters of the limit (`LogManager`
    checks), sockets need the rest."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if soft_limit is None else soft_limit
    if soft == resource.RLIM_INFINITY:
        return MAX_DEFAULT_CAPACITY
    return max(8, min(MAX_DEFAULT_CAPACITY, soft // 8))


class CachedFile:
    """One file of one segment: its path, its open file (None while closed) and the reads
    pinning it. The active segment's log is open for appends (`writer`) outside the count."""

    __slots__ = ("file", "gone", "path", "pins", "writer")

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: io.FileIO | None = None
        self.pins = 0
        self.gone = False
        self.writer = False


class FileCache:
    """Open files of closed segments, least recently used first; safe from any thread."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._cached: OrderedDict[CachedFile, None] = OrderedDict()
        self._open = 0  # descriptors of closed segments: cached, or evicted and still pinned

    @property
    def open_files(self) -> int:
        """Descriptors held now for closed segments (at most the capacity plus those pinned
        by reads under way); active segments hold one more each."""
        return self._open

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = capacity
            self._evict()

    def pin(self, file: CachedFile) -> int:
        """The file's descriptor, opened read-only if need be, held open until `unpin`."""
        with self._lock:
            handle = file.file
            if handle is None:
                if file.gone:
                    raise FileGone(f"{file.path} was deleted, replaced or closed")
                # Opened under the lock: `forget`, which comes before any unlink or rename of
                # the path, cannot slip between the check above and the open.
                handle = file.file = io.FileIO(file.path, "r")
                self._open += 1
                file.pins += 1
                self._cached[file] = None
                self._evict()
                return handle.fileno()
            if file in self._cached:
                self._cached.move_to_end(file)
            file.pins += 1
            return handle.fileno()

    def unpin(self, file: CachedFile) -> None:
        with self._lock:
            file.pins -= 1
            if not file.pins and file not in self._cached:
                self._close(file)  # evicted or forgotten while this read held it

    @contextmanager
    def pinned(self, file: CachedFile) -> Iterator[int]:
        """`pin` for the length of a block."""
        fd = self.pin(file)
        try:
            yield fd
        finally:
            self.unpin(file)

    def open_writer(self, file: CachedFile) -> int:
        """Open (creating) an active segment's log for appends; it stays open until `seal` or
        `forget`."""
        handle = io.FileIO(file.path, "a+")
        with self._lock:
            file.file, file.writer = handle, True
            file.pins += 1
        return handle.fileno()

    def seal(self, file: CachedFile) -> None:
        """The segment closed for appends: its descriptor joins the cache, most recent first."""
        with self._lock:
            self._release_writer(file)
            self._cached[file] = None
            self._evict()

    def forget(self, file: CachedFile) -> None:
        """The segment lets go of the file for good (before deleting or replacing it): close
        the descriptor now, or at its last unpin; never open the path again for it."""
        with self._lock:
            file.gone = True
            if file.writer:
                self._release_writer(file)
            else:
                self._cached.pop(file, None)
            if file.file is not None and not file.pins:
                self._close(file)

    def _release_writer(self, file: CachedFile) -> None:
        file.writer = False
        file.pins -= 1
        self._open += 1

    def _evict(self) -> None:
        while len(self._cached) > self.capacity:
            file, _ = self._cached.popitem(last=False)
            if not file.pins:
                self._close(file)

    def _close(self, file: CachedFile) -> None:
        if file.file is not None:
            file.file.close()
            file.file = None
            self._open -= 1


shared = FileCache(default_capacity())  # the process's cache; `LogManager` sizes it
