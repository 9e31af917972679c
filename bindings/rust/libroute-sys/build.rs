//! Finds libroute with `pkg-config` (run as a plain command: this crate has
//! no dependencies) and tells cargo how to link it.
//!
//! Environment:
//! - `PKG_CONFIG`: the pkg-config program (default `pkg-config`);
//!   `PKG_CONFIG_PATH` and the rest of pkg-config's own variables apply.
//!   An uninstalled meson build is found with
//!   `PKG_CONFIG_PATH=BUILD/meson-uninstalled`.
//! - `LIBROUTE_STATIC=1`: link the static archive (`pkg-config --static`).
//! - `LIBROUTE_SYS_ANY_VERSION=1`: skip the version check below.
//!
//! The declarations in src/lib.rs are written against one minor version of
//! the C API, and while libroute is 0.x a minor release may change the ABI
//! (docs/abi.md), so the build stops if pkg-config reports another minor.

use std::env;
use std::process::Command;

/// The libroute minor series src/lib.rs declares.
const DECLARED: (u32, u32) = (0, 3);

fn pkg_config(args: &[&str]) -> String {
    let prog = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&prog)
        .args(args)
        .arg("libroute")
        .output()
        .unwrap_or_else(|e| {
            panic!("libroute-sys: cannot run `{prog}` ({e}); install pkg-config, or set PKG_CONFIG")
        });
    if !out.status.success() {
        panic!(
            "libroute-sys: `{prog} {} libroute` failed: {}\n\
             Install libroute, or point PKG_CONFIG_PATH at its .pc file \
             (for a meson build tree: BUILD/meson-uninstalled).",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout)
        .expect("libroute-sys: pkg-config printed non-UTF-8")
        .trim()
        .to_string()
}

fn main() {
    for var in [
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "LIBROUTE_STATIC",
        "LIBROUTE_SYS_ANY_VERSION",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let version = pkg_config(&["--modversion"]);
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let found = (parts.next().flatten(), parts.next().flatten());
    if env::var_os("LIBROUTE_SYS_ANY_VERSION").is_none()
        && found != (Some(DECLARED.0), Some(DECLARED.1))
    {
        panic!(
            "libroute-sys: pkg-config found libroute {version}, but this crate declares \
             the {}.{} C API; use a matching libroute-sys (or set LIBROUTE_SYS_ANY_VERSION=1)",
            DECLARED.0, DECLARED.1
        );
    }

    let statik = env::var_os("LIBROUTE_STATIC").is_some_and(|v| v == "1");
    let libs = if statik {
        pkg_config(&["--static", "--libs"])
    } else {
        pkg_config(&["--libs"])
    };
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            if statik && lib == "route" {
                println!("cargo:rustc-link-lib=static=route");
            } else {
                println!("cargo:rustc-link-lib={lib}");
            }
        } else if flag == "-pthread" {
            println!("cargo:rustc-link-lib=pthread");
        }
    }

    // For dependents' build scripts (DEP_ROUTE_INCLUDE, DEP_ROUTE_VERSION)
    // and for this crate's ABI test, which compiles C against the headers.
    let cflags = pkg_config(&["--cflags"]);
    let includes: Vec<&str> = cflags
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-I"))
        .collect();
    println!(
        "cargo:include={}",
        env::join_paths(&includes).unwrap().to_string_lossy()
    );
    println!("cargo:version={version}");
    println!("cargo:rustc-env=LIBROUTE_SYS_CFLAGS={cflags}");
    println!("cargo:rustc-env=LIBROUTE_SYS_LIBS={libs}");
    println!("cargo:rustc-env=LIBROUTE_SYS_VERSION={version}");
}
