#!/usr/bin/env python3
"""include-layers (suite 'style'): lib/ is layered, and its includes say so.

lib/ has one folder per layer (lib/meson.build lists them). A file may
include a header of its own folder or of a folder of a lower layer, never
one of its own layer's other folders or of a layer above, and the include
graph over lib/'s files has no cycle. Internal headers are named by their
path under lib/ ("index/index.h"); a bare name that is not a sibling
header is an error, so a move cannot hide an edge.

usage: include-layers.py LIB_DIR
Prints every offending edge and exits 1; prints a summary and exits 0.
"""
import os
import re
import sys

# Lower layers first; folders on one line are one layer and may not
# include each other.
LAYERS = [
    ["common"],
    ["index", "parts", "learn"],
    ["policy"],
    ["router"],
]
RANK = {f: i for i, layer in enumerate(LAYERS) for f in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main(lib):
    files = {}
    for folder in sorted(os.listdir(lib)):
        d = os.path.join(lib, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                files[folder + "/" + name] = os.path.join(d, name)
    bad = []
    edges = {f: [] for f in files}
    for rel, path in files.items():
        folder = rel.split("/")[0]
        if folder not in RANK:
            bad.append("%s: folder %s is in no layer (include-layers.py)"
                       % (rel, folder))
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if inc.startswith("libroute/") or inc == "libroute.h":
                continue  # public headers
            target = inc if "/" in inc else None
            if target is None:
                sib = folder + "/" + inc
                if sib not in files:
                    bad.append('%s: includes "%s", which is no header of '
                               "lib/%s/ (name internal headers by their path"
                               " under lib/)" % (rel, inc, folder))
                    continue
                target = sib
            if target not in files:
                bad.append('%s: includes "%s", which is not in lib/'
                           % (rel, inc))
                continue
            tfolder = target.split("/")[0]
            if tfolder != folder:
                if tfolder not in RANK:
                    continue
                if RANK[tfolder] >= RANK[folder]:
                    bad.append("%s: includes %s, from a layer %s its own"
                               % (rel, target,
                                  "above" if RANK[tfolder] > RANK[folder]
                                  else "beside"))
            edges[rel].append(target)
    # cycles: depth-first search over the include graph
    state = {}
    stack = []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for g in edges.get(f, []):
            if state.get(g) == 1:
                cyc = stack[stack.index(g):] + [g]
                bad.append("include cycle: " + " -> ".join(cyc))
            elif g not in state:
                visit(g)
        stack.pop()
        state[f] = 2

    for f in sorted(edges):
        if f not in state:
            visit(f)
    for b in bad:
        print("FAIL " + b)
    if bad:
        return 1
    n = sum(len(v) for v in edges.values())
    print("include-layers: %d files, %d internal includes, layers %s, no "
          "cycle" % (len(files), n,
                     " < ".join("/".join(layer) for layer in LAYERS)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-3])
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
