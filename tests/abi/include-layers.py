#!/usr/bin/env python3
"""include-layers (suite 'style'): lib/ is layered, and its includes say so.

lib/ has one folder per layer (lib/meson.build lists them). A file may
include a header of its own folder or of a folder of a lower layer, never
one of its own layer's other folders or of a layer above, and the include
graph over lib/'s files has no cycle. Internal headers are named by their
path under lib/ ("index/index.h"); a bare name that is not a sibling
header is an error, so a move cannot hide an edge.

Files are also grouped into modules: X.c and X.h of one folder are the
module X (either may be missing). Module A depends on module B when a file
of A includes a header of B; the modules must form a DAG. A file-level
check alone misses the cycle that matters: index.c includes impl.h, which
includes index.h, is no cycle of files, but the module index needs impl and
impl needs index, so neither can be read or built without the other. Across
folders the layer rule above already orders the modules; within a folder
this check is what keeps its files layered.

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
    # modules: folder/stem; an edge for every include between two of them
    mod_edges = {}
    for f, targets in edges.items():
        a = module(f)
        mod_edges.setdefault(a, set())
        for g in targets:
            b = module(g)
            if b != a:
                mod_edges[a].add(b)
    bad.extend(module_cycles(mod_edges, edges))
    for b in bad:
        print("FAIL " + b)
    if bad:
        return 1
    n = sum(len(v) for v in edges.values())
    print("include-layers: %d files in %d modules, %d internal includes, "
          "layers %s, no cycle of files or modules"
          % (len(files), len(mod_edges), n,
             " < ".join("/".join(layer) for layer in LAYERS)))
    return 0


def module(rel):
    """index/index_store.c -> index/index_store"""
    return rel.rsplit(".", 1)[0]


def module_cycles(mod_edges, file_edges):
    """Every cycle of the module graph that a depth-first search meets, each
    named with the includes that make its edges."""
    out = []
    state = {}
    stack = []

    def why(a, b):
        return ", ".join("%s includes %s" % (f, g)
                         for f in sorted(file_edges)
                         if module(f) == a
                         for g in sorted(file_edges[f]) if module(g) == b)

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(mod_edges.get(m, ())):
            if state.get(n) == 1:
                cyc = stack[stack.index(n):] + [n]
                out.append("module cycle: %s (%s)"
                           % (" -> ".join(cyc),
                              "; ".join(why(cyc[i], cyc[i + 1])
                                        for i in range(len(cyc) - 1))))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(mod_edges):
        if m not in state:
            visit(m)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-3])
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
