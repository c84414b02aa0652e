"""A failing disk for tests: chosen OS calls answer an errno (EIO, EROFS, ENOSPC...) for the
files under one directory only, as a disk failing under one partition would, while every other
file works. The calls are the OS boundary the engine uses: os.write, os.fsync, os.pread,
os.ftruncate, and `open` / `io.FileIO` for files opened to write."""

from __future__ import annotations

import builtins
import errno
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


class Disk:
    """Makes chosen OS calls fail with an errno for the files under one directory, as a failing
    disk would, until `heal`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, under: Path) -> None:
        self.monkeypatch = monkeypatch
        self.under = str(under) + os.sep
        self.failing: dict[str, int] = {}
        fd_calls = ("write", "fsync", "pread", "ftruncate")
        for name in fd_calls:
            self._wrap_fd_call(name, getattr(os, name))
        self._wrap_open("open", builtins.open, builtins)
        self._wrap_open("FileIO", io.FileIO, io)

    def fail(self, call: str, code: int = errno.EIO) -> None:
        self.failing[call] = code

    def heal(self) -> None:
        self.failing.clear()

    def _mine(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.under)
        except OSError:
            return False

    def _raise(self, call: str) -> None:
        code = self.failing[call]
        raise OSError(code, os.strerror(code))

    def _wrap_fd_call(self, name: str, real: Callable[..., Any]) -> None:
        def call(fd: int, *args: Any) -> Any:
            if name in self.failing and self._mine(fd):
                self._raise(name)
            return real(fd, *args)

        self.monkeypatch.setattr(os, name, call)

    def _wrap_open(self, name: str, real: Callable[..., Any], module: object) -> None:
        """`open` and `io.FileIO` fail for paths under the directory opened for writing."""

        def call(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            writing = any(c in mode for c in "wax+")
            if (
                name in self.failing
                and writing
                and isinstance(path, str | os.PathLike)
                and os.path.abspath(os.fspath(path)).startswith(self.under)
            ):
                self._raise(name)
            return real(path, mode, *args, **kwargs)

        self.monkeypatch.setattr(module, name, call)
