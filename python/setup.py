"""Builds the pure-Python shardckpt package (setuptools only; no compiler).  When SHARDCKPT_LIBRARY names a
libshardckpt.so, or the repository's build/libshardckpt.so exists (`make lib`), it is copied into the
package, so that the installed package finds its library without any environment variable."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("SHARDCKPT_LIBRARY") or os.path.join(HERE, "..", "build", "libshardckpt.so")
        if os.path.isfile(lib):
            dst = os.path.join(self.build_lib, "shardckpt", "libshardckpt.so")
            shutil.copyfile(lib, dst)
            print(f"shardckpt: bundled {os.path.abspath(lib)}")


setup(cmdclass={"build_py": BuildPyWithLibrary})
