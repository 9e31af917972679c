#!/usr/bin/env python3
"""call-layers (suite 'style'): lib/'s calls follow its layers too.

include-layers.py holds the includes to lib/'s layers, but a file can call
a function declared in a header it may include (a folder's face, such as
index/index.h, names functions of every layer of the folder) and so call
upward without a forbidden include. This check reads what the objects
really use: for every object file of the library, `nm` gives the global
symbols it defines and the ones it leaves undefined; an undefined symbol
defined by another object is an edge from the first file's module to the
second's (a call, or a table of functions or data it names). Then:

  - across folders, an edge goes to a folder of a lower layer (the LAYERS
    of include-layers.py), never beside or above;
  - within a folder, the modules' edges form a DAG: no file calls, however
    indirectly, a file that calls it.

Objects are matched to their sources by meson's naming (lib/index/x.c is
lib/<target>.p/index_x.c.o); an object that matches no source of lib/ is
an error, so a change of naming cannot make the check pass on nothing.

Folders in KNOWN_CYCLES keep a cycle among their modules that is reported
but allowed, with the reason given there.

usage: call-layers.py NM LIB_DIR OBJECT_OR_ARCHIVE...
Prints every offending edge and exits 1; prints a summary and exits 0; 77
(skip) when nm is missing.
"""
import importlib.util
import os
import re
import subprocess
import sys

# folder -> why its modules may call each other in a circle (for now)
KNOWN_CYCLES = {}

# archive[member]: name type ...   or   object: name type ...
NM_LINE = re.compile(r"^(?:.*\[(?P<member>[^\]]+)\]|(?P<obj>[^:\[]+)): "
                     r"(?P<name>\S+) (?P<type>\S)")
DEFINED = set("TDBRCVWGSu")  # global definitions (weak and common too)


def load_layers(here):
    spec = importlib.util.spec_from_file_location(
        "include_layers", os.path.join(here, "include-layers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LAYERS


def sources(lib):
    """meson's object base name -> 'folder/stem' for every lib/*/*.c"""
    out = {}
    for folder in sorted(os.listdir(lib)):
        d = os.path.join(lib, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(".c"):
                out["%s_%s.o" % (folder, name)] = "%s/%s" % (folder,
                                                             name[:-2])
    return out


def read_symbols(nm, paths, srcs, bad):
    defs, uses = {}, {}
    for path in paths:
        out = subprocess.run([nm, "-A", "-P", path], capture_output=True,
                             text=True)
        if out.returncode != 0:
            bad.append("%s: nm failed: %s" % (path, out.stderr.strip()))
            continue
        for line in out.stdout.splitlines():
            m = NM_LINE.match(line)
            if m is None:
                continue
            obj = os.path.basename(m.group("member") or m.group("obj"))
            mod = srcs.get(obj)
            if mod is None:
                bad.append("%s: object %s matches no source of lib/"
                           % (path, obj))
                srcs[obj] = mod = "?/" + obj  # report it once
            defs.setdefault(mod, set())
            uses.setdefault(mod, set())
            t = m.group("type")
            if t == "U":
                uses[mod].add(m.group("name"))
            elif t in DEFINED:
                defs[mod].add(m.group("name"))
    return defs, uses


def cycles(nodes, edges):
    """Every cycle a depth-first search meets, as lists of nodes."""
    out, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                out.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(nodes):
        if m not in state:
            visit(m)
    return out


def main(nm, lib, paths):
    if not nm:
        print("call-layers: nm not found")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    layers = load_layers(here)
    rank = {f: i for i, layer in enumerate(layers) for f in layer}
    bad, notes = [], []
    defs, uses = read_symbols(nm, paths, sources(lib), bad)
    if not defs:
        bad.append("no object of lib/ was read from %s" % " ".join(paths))
    owner = {}
    for mod, names in defs.items():
        for s in names:
            owner.setdefault(s, mod)
    edges, why = {}, {}
    for mod in sorted(uses):
        for s in sorted(uses[mod]):
            to = owner.get(s)
            if to is None or to == mod:
                continue
            edges.setdefault(mod, set()).add(to)
            why.setdefault((mod, to), []).append(s)
    n_edges = 0
    for a in sorted(edges):
        fa = a.split("/")[0]
        for b in sorted(edges[a]):
            n_edges += 1
            fb = b.split("/")[0]
            if fa == fb or fa not in rank or fb not in rank:
                continue
            if rank[fb] >= rank[fa]:
                bad.append("%s calls %s (%s), a folder %s its own"
                           % (a, b, ", ".join(why[(a, b)][:4]),
                              "above" if rank[fb] > rank[fa] else "beside"))
    # within each folder
    for folder in sorted({m.split("/")[0] for m in defs}):
        nodes = [m for m in defs if m.split("/")[0] == folder]
        inner = {m: {n for n in edges.get(m, ()) if n in nodes}
                 for m in nodes}
        for cyc in cycles(nodes, inner):
            text = "call cycle: %s (%s)" % (
                " -> ".join(cyc),
                "; ".join("%s uses %s" % (cyc[i], ", ".join(
                    why[(cyc[i], cyc[i + 1])][:3]))
                    for i in range(len(cyc) - 1)))
            if folder in KNOWN_CYCLES:
                notes.append("known " + text)
            else:
                bad.append(text)
        if folder in KNOWN_CYCLES and not any(
                n.startswith("known call cycle: " + folder + "/")
                for n in notes):
            notes.append("%s has no call cycle now: drop it from "
                         "KNOWN_CYCLES" % folder)
    for n in notes:
        print("NOTE " + n)
    for b in bad:
        print("FAIL " + b)
    if bad:
        return 1
    print("call-layers: %d objects, %d edges between modules, calls only "
          "downward, no cycle within a folder%s"
          % (len(defs), n_edges,
             " (known: %s)" % ", ".join(sorted(KNOWN_CYCLES))
             if KNOWN_CYCLES else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print(__doc__.strip().splitlines()[-3])
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
