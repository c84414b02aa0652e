"""The C parts of the produce and fetch paths; everything else is in pyproject.toml.

- gateway/formats/_batchcheck.c: whether a produced batch's records are well formed;
- gateway/formats/_fetchjson.c: a fetched batch -> its records' JSON text;
- gateway/formats/_producejson.c: a JSON produce body -> each partition's record batches;
- gateway/http/_h2session.c: the HTTP/2 session, over libnghttp2 (Debian: libnghttp2-dev);
- engine/_scan.c: the walk over a buffer's record batches (engine.batch.scan).

The first two share gateway/formats/_records.h; _producejson.c and _scan.c share the CRC-32C of
engine/_crc32c.h. Optional: without a C compiler (or libnghttp2's headers) the install still
succeeds and the gateway and engine take the slower, equivalent Python paths (HTTP/2 through
ngh2).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=vla"]

setup(
    ext_modules=[
        Extension(
            f"gateway.formats.{name}",
            [f"gateway/formats/{name}.c"],
            depends=["gateway/formats/_records.h", "engine/_crc32c.h"],
            extra_compile_args=FLAGS,
            optional=True,
        )
        for name in ("_batchcheck", "_fetchjson", "_producejson")
    ]
    + [
        Extension(
            "engine._scan",
            ["engine/_scan.c"],
            depends=["engine/_crc32c.h"],
            extra_compile_args=FLAGS,
            optional=True,
        ),
        Extension(
            "gateway.http._h2session",
            ["gateway/http/_h2session.c"],
            libraries=["nghttp2"],
            extra_compile_args=FLAGS,
            optional=True,
        ),
    ]
)
