"""Install the binding against an installed libroute (found with
pkg-config), for example:

    PKG_CONFIG_PATH=/usr/local/lib/pkgconfig \\
        python3 -m pip install --no-build-isolation bindings/python

From a build tree, without installing anything, use build_ffi.py instead
(README.md)."""

import subprocess

from setuptools import setup


def version():
    try:
        return subprocess.run(["pkg-config", "--modversion", "libroute"],
                              check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("setup.py: pkg-config cannot find libroute; set "
                         "PKG_CONFIG_PATH to its lib/pkgconfig")


setup(
    name="libroute",
    version=version(),
    description="Python binding of libroute, the routing brain of LLM "
                "inference gateways",
    license="MIT",
    packages=["libroute"],
    python_requires=">=3.8",
    setup_requires=["cffi>=1.12"],
    install_requires=["cffi>=1.12"],
    cffi_modules=["libroute/_build.py:ffibuilder_from_pkgconfig"],
    zip_safe=False,
)
