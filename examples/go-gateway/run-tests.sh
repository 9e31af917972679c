#!/usr/bin/env bash
# Test examples/go-gateway against a libroute build directory.
#
#   examples/go-gateway/run-tests.sh BUILD_DIR
#
# Builds the gateway in GOPATH mode with client_golang from Debian's
# /usr/share/gocode (env.sh says why), runs gofmt and go vet, then go test:
# fake engines (examples/gateway/fake_engine.py under python3) behind the
# gateway on loopback, routing, failover, /metrics against
# examples/metric-set.txt; then the tests again under the race detector
# (LR_GO_RACE=0 skips that). Also builds BUILD_DIR/go-gateway and
# BUILD_DIR/instant-engine, what tools/load-test runs. The benchmarks
# (go test -bench .) are not run here.
#
# Installs golang-go and golang-github-prometheus-client-golang-dev when
# missing and run as root. Exit status: 0 passed, 1 failed, 77 skipped
# (no Go toolchain or client_golang).
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# shellcheck source=examples/go-gateway/env.sh
. "$here/env.sh"
rc=0
lr_gogw_env "$build" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
export GOFLAGS=-count=1

cd "$here"
echo "go-gateway: $(go version); libroute $(pkg-config --modversion libroute)"
status=0
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "go-gateway: gofmt would change: $unformatted"
    status=1
fi
go vet . ./instant-engine || status=1
go build -o "$build/go-gateway" . || status=1
go build -o "$build/instant-engine" ./instant-engine || status=1

# shellcheck source=tools/go-test.sh
. "$here/../../tools/go-test.sh"
lr_go_test go-gateway "$status" -timeout 300s .
