"""The one error type the job reports as a one-line message (exit code 2), never a traceback."""

from __future__ import annotations


class IngestError(Exception):
    """Bad input or unusable data: a missing bucket, a malformed manifest, a corrupt segment."""
