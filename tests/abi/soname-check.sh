#!/bin/sh
# soname (STYLE B17): the shared library's SONAME is libroute.so.<major>,
# and the development symlink chain ends at the real file.
#
# usage: soname-check.sh READELF LIBROUTE_SO EXPECTED_SONAME
#        (empty READELF: skipped with exit code 77)
set -u

readelf=$1
lib=$2
expect=$3

if [ -z "$readelf" ]; then
    echo "SKIP: readelf not found"
    exit 77
fi
if [ ! -f "$lib" ]; then
    echo "FAIL: $lib does not exist"
    exit 1
fi

dyn=$("$readelf" -d "$lib") || {
    echo "FAIL: $readelf -d $lib failed"
    exit 1
}
soname=$(printf '%s\n' "$dyn" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
echo "SONAME of $lib: ${soname:-<none>} (expected $expect)"
if [ "$soname" != "$expect" ]; then
    echo "soname: FAILED"
    exit 1
fi

# The file the soname names must sit next to the library, as the
# runtime linker will look for it there after installation.
dir=$(dirname "$lib")
if [ ! -e "$dir/$soname" ]; then
    echo "FAIL: $dir/$soname (the soname link) is missing"
    exit 1
fi
echo "soname: OK"
