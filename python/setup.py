"""Build the ojas Python package: the C extension ojas._C over libojas.

Where libojas comes from, first match wins:
  OJAS_BUILD_DIR   a CMake build directory of this repository (libojas.so
                   in it; headers from ../include), e.g. build-cpu;
  ../build         the default `make` build of this repository, if built;
  pkg-config ojas  an installed ojas (`make install`).
The extension gets an rpath to that directory, so no LD_LIBRARY_PATH is
needed. Offline install: /usr/bin/python3 -m pip install --no-build-isolation ./python
"""
import glob
import os
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _pkg_config():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "ojas"], check=True,
                             capture_output=True, text=True).stdout.strip()
        inc = subprocess.run(["pkg-config", "--variable=includedir", "ojas"], check=True,
                             capture_output=True, text=True).stdout.strip()
        return out, inc
    except (OSError, subprocess.CalledProcessError):
        return None


def _where():
    build = os.environ.get("OJAS_BUILD_DIR")
    if build:
        return os.path.abspath(build), os.path.join(REPO, "include")
    default = os.path.join(REPO, "build")
    if os.path.exists(os.path.join(default, "libojas.so")):
        return default, os.path.join(REPO, "include")
    found = _pkg_config()
    if found:
        return found
    return default, os.path.join(REPO, "include")


libdir, incdir = _where()
if not os.path.exists(os.path.join(libdir, "libojas.so")):
    raise SystemExit("ojas: libojas.so not found in %s; build it first (make, or cmake with "
                     "OJAS_BUILD_DIR=<build dir>)" % libdir)

sources = sorted(os.path.join("src", f) for f in os.listdir(os.path.join(HERE, "src"))
                 if f.endswith(".c"))
ext = Extension(
    "ojas._C",
    sources=sources,
    include_dirs=[incdir, os.path.join(HERE, "src")],
    library_dirs=[libdir],
    libraries=["ojas"],
    runtime_library_dirs=[libdir],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
    # every header the sources read: a changed struct in include/ojas (a
    # field added to oj_train_config, say) must rebuild the extension, or
    # it writes the old layout into the library's new one
    depends=sorted(glob.glob(os.path.join(HERE, "src", "*.h")) +
                   glob.glob(os.path.join(incdir, "ojas", "*.h"))),
)

setup(
    name="ojas",
    version="0.1.0",
    description="Python bindings of ojas, a deep-learning framework in C",
    packages=["ojas", "ojas.nn", "ojas.optim"],
    ext_modules=[ext],
    python_requires=">=3.10",
    install_requires=["numpy"],
)
