"""The C parts of the produce and fetch paths; everything else is in pyproject.toml.

- gateway/api/_batchcheck.c: whether a produced batch's records are well formed;
- gateway/api/_fetchjson.c: a fetched batch -> its records' JSON text;
- gateway/api/_producejson.c: a JSON produce body -> each partition's record batches;
- gateway/http/_h2session.c: the HTTP/2 session, over libnghttp2 (Debian: libnghttp2-dev).

The first two share gateway/api/_records.h. Optional: without a C compiler (or libnghttp2's
headers) the install still succeeds and the gateway takes the slower, equivalent Python paths
(HTTP/2 through ngh2).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=vla"]

setup(
    ext_modules=[
        Extension(
            f"gateway.api.{name}",
            [f"gateway/api/{name}.c"],
            depends=["gateway/api/_records.h"],
            extra_compile_args=FLAGS,
            optional=True,
        )
        for name in ("_batchcheck", "_fetchjson", "_producejson")
    ]
    + [
        Extension(
            "gateway.http._h2session",
            ["gateway/http/_h2session.c"],
            libraries=["nghttp2"],
            extra_compile_args=FLAGS,
            optional=True,
        )
    ]
)
