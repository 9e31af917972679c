#!/usr/bin/env python3
"""Every public header under include/libroute/ is installed: it is listed
in include/meson.build's public_headers, and the umbrella includes it.

usage: headers-installed.py SRC_INCLUDE_DIR
"""
import os
import re
import sys


def main():
    inc = sys.argv[1]
    build = open(os.path.join(inc, 'meson.build')).read()
    listed = set(re.findall(r"'libroute/([a-z_]+\.h)'", build))
    umbrella = open(os.path.join(inc, 'libroute.h')).read()
    included = set(re.findall(r'#include "libroute/([a-z_]+\.h)"', umbrella))
    on_disk = {f for f in os.listdir(os.path.join(inc, 'libroute'))
               if f.endswith('.h')}
    bad = False
    for h in sorted(on_disk - listed):
        print(f'headers-installed: libroute/{h} is not in public_headers '
              '(include/meson.build): it would not be installed')
        bad = True
    for h in sorted(listed - on_disk):
        print(f'headers-installed: public_headers lists missing libroute/{h}')
        bad = True
    for h in sorted(on_disk - included):
        print(f'headers-installed: libroute.h does not include libroute/{h}')
        bad = True
    if bad:
        return 1
    print(f'headers-installed: {len(on_disk)} headers listed and included')
    return 0


if __name__ == '__main__':
    sys.exit(main())
