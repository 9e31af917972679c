#!/usr/bin/env python3
"""symbols-check (STYLE B16, B20.1): three lists of the public ABI must agree.

  exported  the dynamic symbols libroute.so defines (nm -D --defined-only),
            restricted to names starting with lr_
  mapped    the global: names of every node in lib/libroute.sym
  declared  the functions declared with LR_API in include/**/*.h

Any name missing from one of the three fails the test. So do exported
symbols outside the lr_ prefix (a leak past the version script), lr_
symbols without a LIBROUTE_x.y version, wildcards in a global: section and
a .sym node that is not sorted.

usage: symbols-check.py NM LIBROUTE_SO LIBROUTE_SYM INCLUDE_DIR
       (NM may be empty: the test is then skipped with exit code 77)
"""

import os
import re
import subprocess
import sys

SKIP = 77


def fail_usage():
    sys.stderr.write(__doc__)
    sys.exit(2)


def exported_symbols(nm, lib):
    """lr_ names defined in the dynamic symbol table, with their versions;
    plus every other defined name (a leak)."""
    # binutils 2.29..2.34 print @VERSION only when asked; later ones accept
    # the flag and print versions anyway.
    cmd = [nm, "-D", "--defined-only", "--with-symbol-versions", lib]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        cmd.remove("--with-symbol-versions")
        r = subprocess.run(cmd, stdout=subprocess.PIPE,
                           universal_newlines=True, check=True)
    out = r.stdout
    lr = {}
    other = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, full = parts[-2], parts[-1]
        name, _, version = full.partition("@")
        version = version.lstrip("@")
        # Version node names show up as absolute symbols (type A).
        if kind == "A" and re.fullmatch(r"LIBROUTE_\d+\.\d+", name):
            continue
        if name.startswith("lr_"):
            lr[name] = version
        else:
            other.add(full)
    return lr, other


def strip_c_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def mapped_symbols(path):
    """Names under global: in every node; problems found on the way."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"#[^\n]*", "", strip_c_comments(text))
    names = {}
    problems = []
    for m in re.finditer(r"(\w[\w.]*)\s*\{(.*?)\}\s*([\w.]*)\s*;", text, re.S):
        node, body = m.group(1), m.group(2)
        if not re.fullmatch(r"LIBROUTE_\d+\.\d+", node):
            problems.append("node %s is not named LIBROUTE_<major>.<minor>"
                            % node)
        section = None
        in_node = []
        for tok in re.findall(r"[^\s;]+:|[^\s;]+;", body):
            if tok.endswith(":"):
                section = tok[:-1]
                continue
            sym = tok[:-1]
            if section == "global":
                if any(c in sym for c in "*?["):
                    problems.append("wildcard %r in global: of %s"
                                    % (sym, node))
                    continue
                if sym in names:
                    problems.append("%s listed twice (%s and %s)"
                                    % (sym, names[sym], node))
                names[sym] = node
                in_node.append(sym)
            elif section == "local" and sym != "*":
                problems.append("local: of %s should be just '*', has %r"
                                % (node, sym))
        if in_node != sorted(in_node):
            problems.append("global: of %s is not sorted alphabetically"
                            % node)
    if not names:
        problems.append("no global: names found in %s" % path)
    return names, problems


def strip_preprocessor(text):
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = lines[i]
            out.append("")
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


DECL = re.compile(
    r"\bLR_API\b\s*(?:LR_DEPRECATED\([^)]*\)\s*)?([^;{}()]*?)\b(lr_\w+)\s*\(", re.S
)


def declared_symbols(include_dir):
    names = {}
    for root, _dirs, files in os.walk(include_dir):
        for f in sorted(files):
            if not f.endswith(".h"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, include_dir)
            text = open(path, encoding="utf-8").read()
            text = strip_preprocessor(strip_c_comments(text))
            for m in DECL.finditer(text):
                names.setdefault(m.group(2), rel)
    return names


def report(title, names, where=None):
    print("  %s (%d):" % (title, len(names)))
    for n in sorted(names):
        extra = " [%s]" % where[n] if where and n in where else ""
        print("    %s%s" % (n, extra))


def main(argv):
    if len(argv) != 5:
        fail_usage()
    nm, lib, symfile, include_dir = argv[1:]
    if not nm:
        print("SKIP: nm not found")
        return SKIP

    exported, leaked = exported_symbols(nm, lib)
    mapped, problems = mapped_symbols(symfile)
    declared = declared_symbols(include_dir)

    e, m, d = set(exported), set(mapped), set(declared)
    print("exported by %s: %d lr_ symbols" % (os.path.basename(lib), len(e)))
    print("listed in %s: %d" % (os.path.basename(symfile), len(m)))
    print("declared LR_API in %s: %d" % (include_dir, len(d)))

    ok = True
    checks = [
        ("declared LR_API but not exported", d - e, declared),
        ("declared LR_API but not in the .sym file", d - m, declared),
        ("in the .sym file but not exported", m - e, mapped),
        ("in the .sym file but not declared LR_API", m - d, mapped),
        ("exported but not declared LR_API", e - d, None),
        ("exported but not in the .sym file", e - m, None),
    ]
    for title, diff, where in checks:
        if diff:
            ok = False
            print("FAIL: " + title)
            report("names", diff, where)

    unversioned = {n for n, v in exported.items()
                   if not re.fullmatch(r"LIBROUTE_\d+\.\d+", v)}
    if unversioned:
        ok = False
        print("FAIL: exported without a LIBROUTE_x.y version")
        report("names", unversioned)
    wrong_node = {n for n, v in exported.items()
                  if n in mapped and v and v != mapped[n]}
    if wrong_node:
        ok = False
        print("FAIL: exported under a different version node than the .sym")
        report("names", wrong_node)
    if leaked:
        ok = False
        print("FAIL: non-lr_ symbols leak out of the library (B1)")
        report("names", leaked)
    for p in problems:
        ok = False
        print("FAIL: " + p)

    print("symbols-check: " + ("OK, the three sets agree" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
