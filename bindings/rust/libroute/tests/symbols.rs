//! The binding must use every function libroute exports. The exported set
//! is the union of the shared library this test runs against (`nm -D
//! --defined-only` on the libroute.so mapped into the process) and the
//! `global:` names of `lib/libroute.sym` in the source tree. Each must be
//! declared in libroute-sys (`pub fn NAME(`) and used by this crate
//! (`sys::NAME` in src/, called or passed as a function; comments and
//! string literals stripped). Every declaration must also be an export, so
//! a stale one fails too. The functions libroute-sys marks `#[deprecated]`
//! (its ABI test proves they are the headers' `LR_DEPRECATED` ones) are
//! declared and must not be called: the crate uses their replacements.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The libroute.so mapped into this process, if /proc and nm are there.
fn loaded_library() -> Option<String> {
    // Calling into the library makes sure it is loaded (--as-needed).
    assert!(libroute::version_number() > 0);
    if Command::new("nm").arg("--version").output().is_err() {
        eprintln!("nm not found: checking lib/libroute.sym only");
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libroute.so"))
        });
    assert!(
        path.is_some(),
        "libroute.so is not mapped into the test binary"
    );
    path.map(str::to_string)
}

fn dynamic_symbols(so: &str) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", so])
        .output()
        .expect("nm");
    assert!(
        out.status.success(),
        "nm -D {so}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| f[2].split('@').next().unwrap().to_string())
        })
        .filter(|s| s.starts_with("lr_"))
        .collect()
}

fn version_script(path: &Path) -> Option<BTreeSet<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut global = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let l = line.trim();
        if l == "global:" {
            global = true;
        } else if l == "local:" || l.starts_with('}') {
            global = false;
        } else if global {
            if let Some(name) = l.strip_suffix(';').filter(|n| n.starts_with("lr_")) {
                out.insert(name.trim().to_string());
            }
        }
    }
    Some(out)
}

/// Blanks `//` and `/* */` comments and the contents of string literals.
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push('"');
            out.extend(std::iter::repeat(' ').take(i - start - 1));
        } else if src[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if src[i..].starts_with("/*") {
            i = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.push(' ');
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The `lr_` identifiers right after `prefix` in a source; with `call`,
/// only those followed by `(`.
fn names(src: &str, prefix: &str, call: bool) -> BTreeSet<String> {
    let src = strip_comments(src);
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = src[i..].find("lr_") {
        let start = i + at;
        let end = src[start..]
            .find(|c: char| !is_ident(c))
            .map_or(src.len(), |e| start + e);
        let before = &src[..start];
        let whole = before.chars().next_back().map_or(true, |c| !is_ident(c));
        let paren = src[end..].trim_start().starts_with('(');
        if whole && before.ends_with(prefix) && (paren || !call) {
            out.insert(src[start..end].to_string());
        }
        i = end;
    }
    out
}

fn sources(dir: &Path) -> String {
    let mut all = String::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            all.push_str(&sources(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            all.push_str(&std::fs::read_to_string(&p).unwrap());
            all.push('\n');
        }
    }
    all
}

/// The functions declared right after a `#[deprecated]` attribute.
fn deprecated_declarations(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut pending = false;
    for line in src.lines().map(str::trim_start) {
        if line.starts_with("#[deprecated") {
            pending = true;
        } else if let Some(decl) = line.strip_prefix("pub fn ").filter(|_| pending) {
            out.insert(decl[..decl.find('(').unwrap()].to_string());
            pending = false;
        }
    }
    out
}

#[test]
fn every_exported_symbol_is_bound() {
    let mut exported = BTreeSet::new();
    let mut from = Vec::new();
    if let Some(so) = loaded_library() {
        exported.extend(dynamic_symbols(&so));
        from.push(so);
    }
    let sym = manifest().join("../../../lib/libroute.sym");
    if let Some(names) = version_script(&sym) {
        exported.extend(names);
        from.push(sym.display().to_string());
    }
    assert!(
        !from.is_empty(),
        "neither libroute.so (with nm) nor lib/libroute.sym was found"
    );
    assert!(
        exported.len() > 50,
        "only {} lr_ symbols in {from:?}: parsing is broken",
        exported.len()
    );

    let sys_src = std::fs::read_to_string(manifest().join("../libroute-sys/src/lib.rs")).unwrap();
    let declared = names(&sys_src, "pub fn ", true);
    let used = names(&sources(&manifest().join("src")), "sys::", false);
    let deprecated = deprecated_declarations(&sys_src);
    assert!(
        deprecated.contains("lr_router_param_bounds"),
        "deprecated: {deprecated:?}"
    );

    let mut problems = Vec::new();
    for s in &exported {
        if !declared.contains(s) {
            problems.push(format!("{s}: exported, not declared in libroute-sys"));
        }
        if deprecated.contains(s) {
            if used.contains(s) {
                problems.push(format!(
                    "{s}: deprecated, still called by the libroute crate"
                ));
            }
        } else if !used.contains(s) {
            problems.push(format!("{s}: exported, not called by the libroute crate"));
        }
    }
    for s in deprecated.difference(&exported) {
        problems.push(format!("{s}: marked deprecated, not exported"));
    }
    for s in declared.difference(&exported) {
        problems.push(format!("{s}: declared in libroute-sys, not exported"));
    }
    assert!(
        problems.is_empty(),
        "checked against {from:?}:\n  {}",
        problems.join("\n  ")
    );
    eprintln!(
        "{} exported lr_ symbols checked against {from:?}",
        exported.len()
    );
}

#[test]
fn scanner_ignores_comments_and_strings() {
    let src = "a(); sys::lr_a(x); // sys::lr_b()\n/* sys::lr_c() */ let s = \"sys::lr_d\"; \
               sys::xlr_e(); init(sys::lr_f); lr_g()";
    let got: Vec<String> = names(src, "sys::", false).into_iter().collect();
    assert_eq!(got, ["lr_a", "lr_f"]);
    let decl = "pub fn lr_x(a: u32) -> u32;\n// pub fn lr_y(\npub fn lr_z\n(";
    let got: Vec<String> = names(decl, "pub fn ", true).into_iter().collect();
    assert_eq!(got, ["lr_x", "lr_z"]);
}
