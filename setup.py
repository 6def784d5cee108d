"""The offset map's table (src/compactlog/cleaner/_key_table.c), a C extension built by pip with the
machine's C compiler. Declared here because setuptools calls ``[tool.setuptools.ext-modules]`` in
pyproject.toml experimental (pip prints a BuildBackendWarning for it); everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "compactlog.cleaner._key_table",
    sources=["src/compactlog/cleaner/_key_table.c"],
    extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"],
)])
