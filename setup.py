"""The C extensions, built by pip with the machine's C compiler: the offset map's table
(src/compactlog/cleaner/_key_table.c) and the record-batch codec's records
(src/compactlog/protocol/_record_batch.c). Declared here because setuptools calls
``[tool.setuptools.ext-modules]`` in pyproject.toml experimental (pip prints a BuildBackendWarning for it); everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

COMPILE_ARGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(ext_modules=[
    Extension("compactlog.cleaner._key_table", sources=["src/compactlog/cleaner/_key_table.c"],
              extra_compile_args=COMPILE_ARGS),
    Extension("compactlog.protocol._record_batch", sources=["src/compactlog/protocol/_record_batch.c"],
              extra_compile_args=COMPILE_ARGS),
])
