#!/bin/sh
# format-check (STYLE B30, suite 'style'): the library sources and public
# headers are formatted as .clang-format says. Files are globbed when the
# test runs, so new sources are covered without editing meson.build.
#
# usage: format-check.sh CLANG_FORMAT SOURCE_ROOT
#        (empty CLANG_FORMAT: skipped with exit code 77)
#
# clang-format 14 is the reference: other majors lay some constructs out
# differently, so with another version the check is skipped unless
# LR_FORMAT_ANY_VERSION=1 is set.
# To fix a file you own:  clang-format -i FILE
set -u

clang_format=$1
root=$2

if [ -z "$clang_format" ]; then
    echo "SKIP: clang-format not found"
    exit 77
fi
version=$("$clang_format" --version 2>/dev/null)
major=$(printf '%s\n' "$version" | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
echo "using $clang_format: $version"
if [ "$major" != 14 ] && [ "${LR_FORMAT_ANY_VERSION:-0}" != 1 ]; then
    echo "SKIP: reference formatter is clang-format 14, found ${major:-unknown}"
    echo "      (set LR_FORMAT_ANY_VERSION=1 to check anyway)"
    exit 77
fi

cd "$root" || exit 1
set --
for f in lib/*/*.c lib/*/*.h include/*.h include/*/*.h; do
    [ -f "$f" ] && set -- "$@" "$f"
done
if [ $# -eq 0 ]; then
    echo "FAIL: no sources found under $root"
    exit 1
fi

bad=
for f in "$@"; do
    if "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "ok   $f"
    else
        echo "FAIL $f"
        # Show the first differences, as a diff, so the log says what to fix.
        "$clang_format" "$f" | diff -u "$f" - | sed -n '1,40p'
        bad="$bad $f"
    fi
done
if [ -n "$bad" ]; then
    echo "format-check: FAILED:$bad"
    echo "fix with: clang-format -i$bad"
    exit 1
fi
echo "format-check: OK, $# files"
