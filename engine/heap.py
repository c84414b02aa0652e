"""The process's heap with glibc's allocator: freed pages handed back to the system, and a cap
on the malloc arenas threads get, so that RSS follows what is in use. Without glibc (musl,
macOS) nothing is done.

glibc keeps the heap's freed pages: a log server's large buffers (segment reads, compaction
passes, tiering uploads, a growing index) leave free regions behind them, and RSS rises and
stays; `trim` hands the whole free pages of every arena back. glibc also gives threads arenas
of their own (up to eight per core): threads that each free into a different arena what the
next allocation, in another thread, cannot reuse make the arenas grow while what is in use
stays flat; `limit_arenas` caps them (MALLOC_ARENA_MAX) before the first thread starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc: no malloc_trim
        return None
    return libc


_LIBC = _glibc()
_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def available() -> bool:
    """Whether the allocator is glibc's (else `trim` and `limit_arenas` do nothing)."""
    return _LIBC is not None


def limit_arenas(count: int) -> bool:
    """Let the process use at most `count` malloc arenas (0: glibc's own limit); call it
    before any thread starts. Whether it took effect (False without glibc)."""
    return _LIBC is not None and count > 0 and bool(_LIBC.mallopt(_M_ARENA_MAX, count))


def trim() -> bool:
    """Return the heap's free pages to the system; whether any were (False without glibc)."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))
