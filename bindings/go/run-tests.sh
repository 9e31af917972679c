#!/usr/bin/env bash
# Run the Go binding's tests against a libroute build directory.
#
#   bindings/go/run-tests.sh BUILD_DIR
#
# BUILD_DIR is a meson build of libroute (meson setup BUILD_DIR && ninja -C
# BUILD_DIR). cgo finds the library through BUILD_DIR's uninstalled
# pkg-config file, and the tests load BUILD_DIR's libroute.so.
#
# Installs Debian's golang-go when `go` is missing and this runs as root.
# Runs gofmt and go vet, then go test twice: with GODEBUG=cgocheck=2 (every
# pointer that crosses into C is checked), and with the race detector
# (LR_GO_RACE=0 skips that run). No module is fetched: GOPROXY=off.
#
# Exit status: 0 passed, 1 failed, 77 skipped (no Go toolchain).
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v go >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "go-binding: installing golang-go"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q golang-go >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q golang-go >/dev/null; } ||
            true
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "go-binding: skipped: no Go toolchain (apt-get install golang-go)"
        exit 77
    fi
fi

pc_dir=$build/meson-uninstalled
if [ ! -f "$pc_dir/libroute-uninstalled.pc" ]; then
    echo "go-binding: $pc_dir/libroute-uninstalled.pc not found: is $build a meson build of libroute?" >&2
    exit 1
fi
export PKG_CONFIG_PATH=$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdirs=$(pkg-config --libs-only-L libroute | sed -e 's/^-L//' -e 's/ -L/:/g' -e 's/ *$//')
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The module has no dependencies; nothing may be downloaded.
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GO111MODULE=on
export CGO_ENABLED=1
# go test caches results by file contents, not by the .so they ran with.
export GOFLAGS="$GOFLAGS -count=1"

cd "$here"
echo "go-binding: $(go version); libroute $(pkg-config --modversion libroute) from $libdirs"
status=0

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "go-binding: gofmt would change: $unformatted"
    status=1
fi
go vet ./... || status=1

# shellcheck source=tools/go-test.sh
. "$here/../../tools/go-test.sh"
LR_GO_TEST_ENV=GODEBUG=cgocheck=2 lr_go_test go-binding "$status" ./...
