"""The C parts of the JSON paths; everything else is in pyproject.toml.

- gateway/_fetchjson.c: a fetched batch -> its records' JSON text;
- gateway/_producejson.c: a JSON produce body -> each partition's record batches.

Optional: without a C compiler the install still succeeds and JSON fetches and produces take
the slower, equivalent Python paths.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=vla"]

setup(
    ext_modules=[
        Extension(f"gateway.{name}", [f"gateway/{name}.c"], extra_compile_args=FLAGS, optional=True)
        for name in ("_fetchjson", "_producejson")
    ]
)
