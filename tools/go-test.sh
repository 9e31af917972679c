# Sourced by bindings/go/run-tests.sh and examples/go-gateway/run-tests.sh:
# one way to run a Go package's tests and count them.
#
#   lr_go_test NAME STATUS GO_TEST_ARGS...
#
# Runs `go test -v GO_TEST_ARGS` (with LR_GO_TEST_ENV, e.g.
# GODEBUG=cgocheck=2, in its environment), prints the test lines or, on
# failure, the whole log; then, unless LR_GO_RACE=0, `go test -race
# GO_TEST_ARGS`. Prints "NAME: P passed, F failed" and returns 1 if STATUS
# (the caller's earlier checks: gofmt, vet) or either run failed, else 0.
lr_go_test()
{
    local name=$1 status=$2
    shift 2
    local log passed failed
    log=$(mktemp)
    # shellcheck disable=SC2086 # LR_GO_TEST_ENV is a list of VAR=VALUE
    if env ${LR_GO_TEST_ENV:-} go test -v "$@" >"$log" 2>&1; then
        grep -E '^(--- |ok)' "$log"
    else
        cat "$log"
        status=1
    fi
    passed=$(grep -c '^--- PASS' "$log" || true)
    failed=$(grep -c '^--- FAIL' "$log" || true)
    if [ "$status" = 1 ] && [ "$failed" = 0 ]; then
        failed=1 # did not build, or died outside a test
    fi
    if [ "${LR_GO_RACE:-1}" != 0 ]; then
        if go test -race "$@" >"$log" 2>&1; then
            echo "$name: race detector: ok"
        else
            cat "$log"
            echo "$name: race detector: FAILED"
            status=1
            failed=$((failed + 1))
        fi
    fi
    rm -f "$log"
    echo "$name: $passed passed, $failed failed"
    [ "$status" = 0 ]
}
