#!/usr/bin/env python3
"""pkgconfig (STYLE B38, B40): the generated pkg-config files work.

1. The .pc that `meson install` will install (BUILD/meson-private/libroute.pc)
   has the right Name, Version, Libs (-lroute) and Cflags.
2. Through the uninstalled .pc (BUILD/meson-uninstalled/
   libroute-uninstalled.pc, selected with PKG_CONFIG_PATH), a small program
   that includes only <libroute.h> compiles with
   `cc $(pkg-config --cflags --libs libroute-uninstalled)`, links against the
   shared library, runs, and prints the version the project declares.

usage: pkgconfig-check.py PKG_CONFIG BUILD_ROOT VERSION LIBROUTE_SO CC [ARGS...]
       (no PKG_CONFIG: skipped with exit code 77)
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

SKIP = 77

PROGRAM = r"""
#include <libroute.h>

#include <stdio.h>
#include <string.h>

int
main(void)
{
    if (lr_version_number() != LR_VERSION_NUMBER)
        return 2;
    if (strcmp(lr_version_string(), LR_VERSION_STRING) != 0)
        return 3;
    if (strcmp(lr_status_name(LR_EINVAL), "LR_EINVAL") != 0)
        return 4;
    printf("%s\n", lr_version_string());
    return 0;
}
"""


def read_pc(path):
    fields = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\s*([A-Za-z][\w.]*)\s*:\s*(.*?)\s*$", line)
        if m:
            fields[m.group(1)] = m.group(2)
    return fields


def main(argv):
    if len(argv) < 6:
        sys.stderr.write(__doc__)
        return 2
    pkg_config, build_root, version, lib = argv[1:5]
    libdir = os.path.dirname(os.path.abspath(lib))
    cc = [a for a in argv[5:] if a]
    if not pkg_config:
        print("SKIP: pkg-config not found")
        return SKIP
    errors = []

    # 1. The .pc to be installed.
    installed = os.path.join(build_root, "meson-private", "libroute.pc")
    if not os.path.exists(installed):
        errors.append("%s was not generated" % installed)
    else:
        pc = read_pc(installed)
        expect = {"Name": "libroute", "Version": version}
        for k, v in expect.items():
            if pc.get(k) != v:
                errors.append("%s: %s is %r, expected %r"
                              % (installed, k, pc.get(k), v))
        if "-lroute" not in pc.get("Libs", "").split():
            errors.append("%s: Libs %r lacks -lroute"
                          % (installed, pc.get("Libs")))
        if "-I${includedir}" not in pc.get("Cflags", "").split():
            errors.append("%s: Cflags %r lacks -I${includedir}"
                          % (installed, pc.get("Cflags")))
        print("installed pc: Name=%s Version=%s Libs=%s Cflags=%s"
              % (pc.get("Name"), pc.get("Version"), pc.get("Libs"),
                 pc.get("Cflags")))

    # 2. Build and run a program through the uninstalled .pc.
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        [os.path.join(build_root, "meson-uninstalled")] +
        ([env["PKG_CONFIG_PATH"]] if env.get("PKG_CONFIG_PATH") else []))

    def pkg(*args):
        r = subprocess.run([pkg_config] + list(args) +
                           ["libroute-uninstalled"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if r.returncode != 0:
            errors.append("pkg-config %s failed:\n%s"
                          % (" ".join(args), r.stdout))
            return None
        return r.stdout.strip()

    modversion = pkg("--modversion")
    flags = pkg("--cflags", "--libs")
    if modversion is not None and modversion != version:
        errors.append("uninstalled pc: version %r, expected %r"
                      % (modversion, version))
    if flags is not None:
        print("uninstalled pc: %s" % flags)
        with tempfile.TemporaryDirectory(prefix="lr-pkgconfig-") as tmp:
            src = os.path.join(tmp, "hello.c")
            exe = os.path.join(tmp, "hello")
            with open(src, "w") as f:
                f.write(PROGRAM)
            cmd = (cc + ["-std=c11", "-Wall", "-Wextra", "-Werror", src,
                         "-o", exe] + shlex.split(flags) +
                   ["-Wl,-rpath," + libdir])
            print("$ " + " ".join(shlex.quote(c) for c in cmd))
            r = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               universal_newlines=True)
            if r.returncode != 0:
                errors.append("compiling against the uninstalled pc "
                              "failed:\n" + r.stdout)
            else:
                r = subprocess.run([exe], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT,
                                   universal_newlines=True)
                out = r.stdout.strip()
                print("program printed %r (exit %d)" % (out, r.returncode))
                if r.returncode != 0 or out != version:
                    errors.append("program linked via pkg-config printed "
                                  "%r with exit code %d; expected %r"
                                  % (out, r.returncode, version))

    for e in errors:
        print("FAIL: " + e)
    print("pkgconfig: " + ("FAILED" if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
