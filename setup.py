"""The C part of the fetch path (gateway/_fetchjson.c); everything else is in pyproject.toml.

Optional: without a C compiler the install still succeeds and JSON fetches take the slower,
equivalent Python path.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gateway._fetchjson",
            ["gateway/_fetchjson.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=vla"],
            optional=True,
        )
    ]
)
