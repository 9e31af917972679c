#!/usr/bin/env python3
"""headers-c11 / headers-cxx (STYLE B31): every public header compiles alone.

For include/libroute.h and each include/libroute/lr_*.h, a one-line source
file that includes just that header (twice, to exercise the include guard)
is compiled with -fsyntax-only:

  c    COMPILER -std=c11 -pedantic -Wall -Wextra -Werror ...
  cxx  COMPILER -std=c++11 -pedantic -Wall -Wextra -Werror ...

The headers are found through -I SRC_INCLUDE (and the generated
lr_version.h through -I BUILD_INCLUDE), exactly as an installed copy would
be. Each failure prints the compiler's output.

usage: headers-check.py c|cxx SRC_INCLUDE BUILD_INCLUDE [COMPILER ARGS...]
       (no COMPILER: the test is skipped with exit code 77)
"""

import glob
import os
import subprocess
import sys
import tempfile

SKIP = 77

FLAGS = {
    "c": ["-x", "c", "-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror",
          "-Wstrict-prototypes", "-Wundef", "-fsyntax-only"],
    "cxx": ["-x", "c++", "-std=c++11", "-pedantic", "-Wall", "-Wextra",
            "-Werror", "-Wundef", "-fsyntax-only"],
}


def main(argv):
    if len(argv) < 4 or argv[1] not in FLAGS:
        sys.stderr.write(__doc__)
        return 2
    lang, src_inc, build_inc = argv[1:4]
    compiler = [a for a in argv[4:] if a]
    if not compiler:
        print("SKIP: no %s compiler found"
              % ("C" if lang == "c" else "C++"))
        return SKIP
    if not os.path.exists(os.path.join(build_inc, "lr_version.h")):
        print("FAIL: %s/lr_version.h was not generated" % build_inc)
        return 1

    headers = [os.path.join(src_inc, "libroute.h")]
    headers += sorted(glob.glob(os.path.join(src_inc, "libroute", "lr_*.h")))
    headers = [h for h in headers if os.path.exists(h)]
    if len(headers) < 2:
        print("FAIL: no public headers found under %s" % src_inc)
        return 1

    failed = []
    with tempfile.TemporaryDirectory(prefix="lr-headers-") as tmp:
        for h in headers:
            rel = os.path.relpath(h, src_inc)
            src = os.path.join(tmp, "only.%s" % ("c" if lang == "c" else "cc"))
            with open(src, "w") as f:
                f.write("/* %s compiled alone */\n" % rel)
                f.write("#include <%s>\n#include <%s>\n" % (rel, rel))
            cmd = compiler + FLAGS[lang] + ["-I", src_inc, "-I", build_inc,
                                            src]
            r = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               universal_newlines=True)
            if r.returncode == 0:
                print("ok   %s" % rel)
            else:
                failed.append(rel)
                print("FAIL %s\n  $ %s\n%s" % (rel, " ".join(cmd), r.stdout))
    if failed:
        print("headers-%s: FAILED: %s" % (lang, ", ".join(failed)))
        return 1
    print("headers-%s: OK, %d headers compile alone" % (lang, len(headers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
