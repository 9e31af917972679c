#!/usr/bin/env bash
# Run the Rust bindings' tests against a libroute build directory.
#
#   bindings/rust/run-tests.sh BUILD_DIR
#
# BUILD_DIR is a meson build of libroute (meson setup BUILD_DIR && ninja -C
# BUILD_DIR). libroute-sys's build script finds the library through
# BUILD_DIR's uninstalled pkg-config file, and the tests load BUILD_DIR's
# libroute.so. Cargo's output goes to BUILD_DIR/cargo-target (or
# $CARGO_TARGET_DIR), never into the source tree. Nothing is downloaded:
# the crates have no dependencies and cargo runs --offline.
#
# Runs cargo fmt --check, cargo clippy -D warnings (LR_RUST_CLIPPY=0 skips
# it) and cargo test over the workspace (unit, integration and doc tests,
# including libroute-sys's ABI test, which needs a C compiler).
#
# Exit status: 0 passed, 1 failed, 77 skipped (no cargo).
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do
    if [ -x "$d/cargo" ]; then
        PATH=$d:$PATH
        break
    fi
done
if ! command -v cargo >/dev/null 2>&1; then
    echo "rust-binding: skipped: cargo not found (install a Rust toolchain, 1.77 or later)"
    exit 77
fi
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "rust-binding: pkg-config not found (apt-get install pkg-config)" >&2
    exit 1
fi

pc_dir=$build/meson-uninstalled
if [ ! -f "$pc_dir/libroute-uninstalled.pc" ]; then
    echo "rust-binding: $pc_dir/libroute-uninstalled.pc not found: is $build a meson build of libroute?" >&2
    exit 1
fi
export PKG_CONFIG_PATH=$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdirs=$(pkg-config --libs-only-L libroute | sed -e 's/^-L//' -e 's/ -L/:/g' -e 's/ *$//')
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$build/cargo-target}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
export CARGO_NET_OFFLINE=true
export CARGO_TERM_COLOR=never

cd "$here"
echo "rust-binding: $(cargo --version); libroute $(pkg-config --modversion libroute) from $libdirs"
status=0

if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --check || { echo "rust-binding: cargo fmt would change the files above"; status=1; }
fi
if [ "${LR_RUST_CLIPPY:-1}" != 0 ] && cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --offline --workspace --all-targets -q -- -D warnings || status=1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if cargo test --offline --workspace >"$log" 2>&1; then
    grep -E '^(test |     Running|   Doc-tests)' "$log" | grep -v '^test result' || true
else
    cat "$log"
    status=1
fi
# Totals over every test binary ("test result: ok. N passed; M failed; ...").
read -r passed failed < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" |
    awk '{p += $1; f += $2} END {print p + 0, f + 0}')
if [ $status = 1 ] && [ "$failed" = 0 ]; then
    failed=1 # a build, fmt or clippy failure
fi
echo "rust-binding: $passed passed, $failed failed"
exit $status
