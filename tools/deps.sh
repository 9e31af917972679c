#!/usr/bin/env bash
# Install the Debian 12 packages libroute needs, only those that are missing.
#
#   tools/deps.sh            build + unit tests
#   tools/deps.sh --full     everything tools/run-tests uses (clang and
#                            libFuzzer, valgrind, g++, clang-format,
#                            python3 + cffi, binutils, abigail-tools,
#                            and for the gateway replicas' end-to-end
#                            test redis-server, python3-redis,
#                            python3-zmq, python3-msgpack;
#                            python3-prometheus-client for the gateway's
#                            /metrics, debhelper and lintian for the
#                            Debian packages, cmake, git, python3-numpy
#                            and python3-yaml for the real-engine test;
#                            tools/real/realfleet.py adds nodejs and npm
#                            when there is no npm command)
#   tools/deps.sh --coverage the basic set and gcovr, for tools/coverage
#                            only (not on CI's path)
#
# or, from another bash script:
#
#   . tools/deps.sh && lr_deps_install --full
#
# Nothing is touched when every package is already installed, so it runs
# fine as an ordinary user on a prepared machine. When something is missing
# it needs root: it runs `apt-get update` once, then installs the missing
# packages non-interactively, and fails loudly if that does not work.

LR_DEPS_BASIC=(build-essential meson ninja-build pkg-config libxxhash-dev
    uthash-dev libcmocka-dev)
LR_DEPS_FULL=(clang libclang-rt-14-dev valgrind g++ clang-format python3
    python3-cffi binutils abigail-tools redis-server python3-redis python3-zmq
    python3-msgpack python3-prometheus-client debhelper lintian cmake git
    python3-numpy python3-yaml)
LR_DEPS_COVERAGE=(gcovr)

# Print the packages of "$@" that are not installed, one per line.
lr_deps_missing()
{
    local p status
    for p in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || status=
        case $status in
        *" installed") ;;
        *) printf '%s\n' "$p" ;;
        esac
    done
}

# lr_deps_install [--full|--coverage]: returns 0 when everything asked for
# is present.
lr_deps_install()
{
    local want=("${LR_DEPS_BASIC[@]}")
    case ${1:-} in
    --full) want+=("${LR_DEPS_FULL[@]}") ;;
    --coverage) want+=("${LR_DEPS_COVERAGE[@]}") ;;
    "" | --basic) ;;
    *)
        echo "deps.sh: unknown option '$1' (use --full, --coverage or" \
            "nothing)" >&2
        return 2
        ;;
    esac

    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "deps.sh: dpkg-query not found: this helper is for Debian 12;" \
            "install the equivalent of: ${want[*]}" >&2
        return 1
    fi

    local missing
    mapfile -t missing < <(lr_deps_missing "${want[@]}")
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi

    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "deps.sh: these packages are missing and installing them" \
                "needs root:" >&2
            echo "    apt-get install ${missing[*]}" >&2
            echo "deps.sh: run that as root (or run this script as root)," \
                "then try again." >&2
            return 1
        fi
    fi

    echo "deps.sh: installing missing packages: ${missing[*]}"
    local log
    log=$(mktemp "${TMPDIR:-/tmp}/lr-deps.XXXXXX") || return 1
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get update -q >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "deps.sh: FAILED: apt-get update" >&2
        return 1
    fi
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -q -y --no-install-recommends "${missing[@]}" \
        >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "deps.sh: FAILED: apt-get install ${missing[*]}" >&2
        return 1
    fi
    rm -f "$log"

    mapfile -t missing < <(lr_deps_missing "${want[@]}")
    if [ "${#missing[@]}" -ne 0 ]; then
        echo "deps.sh: FAILED: still missing after install: ${missing[*]}" >&2
        return 1
    fi
    echo "deps.sh: done"
}

# Executed rather than sourced: do the installation.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    lr_deps_install "$@"
fi
