"""Builds phub._phub with the project's CMake (the same build as the rest of PHub) and hands the
module to setuptools: pip install ./phub/python. PHUB_BUILD_DIR reuses a configured build tree
(deploy/build.sh's build/ by default when it exists); otherwise CMake configures one.
PHUB_SOURCE_DIR names the checkout when this folder was copied out of it (tests/python does, so
that pip's build leaves nothing in the source tree)."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(os.environ.get("PHUB_SOURCE_DIR", Path(__file__).resolve().parents[2]))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(os.environ.get("PHUB_BUILD_DIR", ROOT / "build"))
        if not (build / "CMakeCache.txt").exists():
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=Release", "-DPHUB_BUILD_BENCH=OFF"])
        subprocess.check_call(["cmake", "--build", str(build), "--target", "phub_python"])
        built = sorted((build / "python" / "phub").glob("_phub*.so"))
        if not built:
            raise RuntimeError(f"CMake built no phub/_phub*.so under {build}: is pybind11-dev "
                               "installed (deploy/install-deps.sh)?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


setup(ext_modules=[Extension("phub._phub", sources=[])], cmdclass={"build_ext": CMakeBuild})
