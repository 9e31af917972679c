# Sourced by run-tests.sh and tools/load-test: the Go environment that
# builds examples/go-gateway without the module proxy.
#
#   . examples/go-gateway/env.sh BUILD_DIR
#
# GOPATH mode (GO111MODULE=off) over a scratch GOPATH in BUILD_DIR, where
# src/libroute links to bindings/go, and Debian's /usr/share/gocode, where
# golang-github-prometheus-client-golang-dev puts client_golang and what it
# imports. Module mode cannot take those sources without a network: every
# module in client_golang's requirement graph would need a replace line,
# including google.golang.org/appengine, which Debian does not package;
# GOPATH mode reads only the packages actually imported.
#
# Sets PKG_CONFIG_PATH and LD_LIBRARY_PATH to BUILD_DIR's uninstalled
# libroute, as bindings/go/run-tests.sh does. Returns 77 when go or
# client_golang is missing and cannot be installed (not root).

lr_gogw_env()
{
    local build root
    build=$(cd "$1" && pwd) || return 1
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    local gocode=/usr/share/gocode
    local prom=$gocode/src/github.com/prometheus/client_golang/prometheus
    if ! command -v go >/dev/null 2>&1 || [ ! -d "$prom" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "go-gateway: installing golang-go and" \
                "golang-github-prometheus-client-golang-dev"
            export DEBIAN_FRONTEND=noninteractive
            local pkgs=(golang-go golang-github-prometheus-client-golang-dev)
            apt-get install -y -q --no-install-recommends "${pkgs[@]}" \
                >/dev/null 2>&1 ||
                { apt-get update -q >/dev/null &&
                    apt-get install -y -q --no-install-recommends \
                        "${pkgs[@]}" >/dev/null; } || true
        fi
        if ! command -v go >/dev/null 2>&1 || [ ! -d "$prom" ]; then
            echo "go-gateway: skipped: needs golang-go and" \
                "golang-github-prometheus-client-golang-dev"
            return 77
        fi
    fi
    local pc_dir=$build/meson-uninstalled
    if [ ! -f "$pc_dir/libroute-uninstalled.pc" ]; then
        echo "go-gateway: $pc_dir/libroute-uninstalled.pc not found:" \
            "is $build a meson build of libroute?" >&2
        return 1
    fi
    export PKG_CONFIG_PATH=$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    local libdirs
    libdirs=$(pkg-config --libs-only-L libroute |
        sed -e 's/^-L//' -e 's/ -L/:/g' -e 's/ *$//')
    export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

    local gopath=$build/go-gateway-gopath
    mkdir -p "$gopath/src"
    ln -sfn "$root/bindings/go" "$gopath/src/libroute"
    export GO111MODULE=off GOPATH=$gopath:$gocode GOPROXY=off GOFLAGS=
    export GOTOOLCHAIN=local CGO_ENABLED=1
}
