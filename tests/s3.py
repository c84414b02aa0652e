"""A real S3 endpoint for tests (`moto_server`, started on a free port), and a TCP proxy in
front of it that can refuse connections (S3 down) or hold a request (a node killed while it
uploads), so tests choose exactly when S3 fails."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any

from gateway.workers.local_cluster import free_port
from loadtests.common import MotoServer

__all__ = ["CREDENTIALS", "MotoServer", "S3Proxy", "s3_environment"]


CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


class S3Proxy:
    """A TCP proxy to `target` on its own port and thread. `down()` refuses and cuts every
    connection until `up()`; `hold(pattern)` stops forwarding the connection whose request
    bytes contain `pattern` (the request never completes) and sets `held`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.held = threading.Event()
        self._hold: bytes | None = None
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.up()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    def up(self) -> None:
        self._call(self._listen())

    def down(self) -> None:
        self._call(self._close())

    def hold(self, pattern: bytes | None) -> None:
        self._hold = pattern
        self.held.clear()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.port, reuse_address=True
            )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(
            self._pipe(reader, up_writer, requests=True),
            self._pipe(up_reader, writer, requests=False),
            return_exceptions=True,
        )
        self._writers.difference_update((writer, up_writer))

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, requests: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if requests and self._hold is not None and self._hold in data:
                    self.held.set()
                    await asyncio.Event().wait()  # never forwarded
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        self.down()
        self._call(self._cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def s3_environment() -> dict[str, str]:
    """The environment a node needs to reach moto (boto3's chain reads these)."""
    return {**os.environ, **CREDENTIALS}


def manifest_of(moto: MotoServer, bucket: str, prefix: str, topic: str, partition: int) -> Any:
    """The partition's manifest.json as the engine reads it, or None while there is none."""
    import botocore.exceptions

    from engine.tiered.manifest import decode_manifest, partition_prefix

    key = partition_prefix(prefix, topic, partition) + "manifest.json"
    try:
        answer = moto.client().get_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError:
        return None
    return decode_manifest(answer["Body"].read())
