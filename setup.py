"""Builds larbinpy's C extensions: the link scanner (`larbinpy/links/_tagscan.c`), the
plain-link resolver (`larbinpy/links/_plainlinks.c`) and the seen-set's test of a page's links
(`larbinpy/frontier/_seenbits.c`, with xxHash's header beside it), each the twin of pure
Python code.

Everything else about the package is in pyproject.toml. A machine without a C compiler (or
without Python's headers) gets a message saying so at install time, not an error at run time.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """build_ext that names what is missing when the compiler cannot run."""

    def run(self) -> None:
        """Build, or stop with what to install."""
        try:
            super().run()
        except Exception as exc:  # CCompilerError, DistutilsExecError, PlatformError...
            raise SystemExit(
                "larbinpy: could not build its C extensions (larbinpy/links/*.c, "
                "larbinpy/frontier/_seenbits.c): "
                f"{exc}\nIt needs a C compiler and Python's headers: on Debian, "
                "`apt-get install gcc python3-dev`, then install larbinpy again."
            ) from exc


setup(
    ext_modules=[Extension(f"larbinpy.{name}".replace("/", "."), [f"larbinpy/{name}.c"],
                           extra_compile_args=["-O2"])
                 for name in ("links/_tagscan", "links/_plainlinks", "frontier/_seenbits")],
    cmdclass={"build_ext": BuildExt},
)
