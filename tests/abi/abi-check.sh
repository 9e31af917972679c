#!/bin/sh
# abi-check (STYLE B20.3): the built libroute.so has the ABI stored in
# abi/libroute.abi (abidw's XML of this release's library): no symbol
# removed, no function or public type changed. Symbols added since are
# not a break and are not reported (--no-added-syms) until the stored
# file is refreshed. A deliberate change refreshes the stored file in the
# same commit: tools/abi-update.
#
# usage: abi-check.sh ABIDIFF STORED_ABI LIBROUTE_SO INCLUDE_DIR BUILD_INCLUDE
#        (empty ABIDIFF: skipped with exit code 77; a library built without
#        debug information is skipped too: abidiff needs its types)
set -u

abidiff=$1
stored=$2
lib=$3
inc=$4
binc=$5

if [ -z "$abidiff" ]; then
    echo "SKIP: abidiff not found (Debian package abigail-tools)"
    exit 77
fi
if [ ! -f "$stored" ]; then
    echo "FAIL: $stored is missing (tools/abi-update writes it)"
    exit 1
fi
if ! readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info'; then
    echo "SKIP: $lib has no debug information (build with -g)"
    exit 77
fi
"$abidiff" --no-added-syms --drop-private-types \
    --headers-dir2 "$inc" --headers-dir2 "$binc" \
    "$stored" "$lib"
rc=$?
# abidiff's status is a bit set: 1 error, 2 usage, 4 ABI change, 8
# incompatible ABI change.
if [ "$rc" -eq 0 ]; then
    echo "abi-check: the library's ABI is the stored one (additions aside)"
    exit 0
fi
echo "abi-check: FAILED (abidiff status $rc): the ABI above changed."
echo "If that is deliberate, run tools/abi-update and commit abi/libroute.abi"
echo "with the change, and say so in CHANGELOG.md's ABI line."
exit 1
