package libroute

/*
#include <stdlib.h>
#include <libroute.h>
*/
import "C"

import (
	"reflect"
	"strings"
	"time"
	"unsafe"
)

// cstring copies s to C memory for a call; the caller frees it with
// C.free. A NUL inside s would silently cut the name short in C, so it is
// rejected as LR_EINVAL instead.
func cstring(s, op string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, invalid(op)
	}
	return C.CString(s), nil
}

func freeCString(p *C.char) {
	C.free(unsafe.Pointer(p))
}

// strBytes passes a Go string's bytes to C for the length of one call, as
// (pointer, length), with no copy: the shims copy them NUL-terminated
// (shim.c name_of). An empty string is (nil, 0). A NUL inside s would cut
// the name short in C, so ok is false then (LR_EINVAL).
func strBytes(s string) (p *C.char, n C.size_t, ok bool) {
	if len(s) == 0 {
		return nil, 0, true
	}
	if strings.IndexByte(s, 0) >= 0 {
		return nil, 0, false
	}
	// A string's bytes hold no Go pointers, so cgo lets C read them.
	h := (*reflect.StringHeader)(unsafe.Pointer(&s))
	return (*C.char)(unsafe.Pointer(h.Data)), C.size_t(len(s)), true
}

// cstrings copies names to C memory as a C array of C strings for a call
// (lr_instance_spec.models, lr_adapter_stats.running): a Go struct passed
// to C may not point to Go memory that holds pointers. free releases it
// all; (nil, no-op) for no names.
func cstrings(names []string, op string) (arr **C.char, free func(), err error) {
	if len(names) == 0 {
		return nil, func() {}, nil
	}
	for _, n := range names {
		if strings.IndexByte(n, 0) >= 0 {
			return nil, nil, invalid(op)
		}
	}
	size := C.size_t(len(names)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))
	base := (**C.char)(C.malloc(size))
	if base == nil {
		return nil, nil, check(C.LR_ENOMEM, op)
	}
	ptrs := unsafe.Slice(base, len(names))
	for i, n := range names {
		ptrs[i] = C.CString(n)
	}
	return base, func() {
		for _, p := range ptrs {
			C.free(unsafe.Pointer(p))
		}
		C.free(unsafe.Pointer(base))
	}, nil
}

// The pointer helpers below pass a slice's backing array to C for the length
// of one call (allowed by cgo: the arrays hold no Go pointers). An empty
// slice becomes NULL, which the API accepts together with a zero count.

func u32ptr(s []uint32) *C.uint32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint32_t)(unsafe.Pointer(&s[0]))
}

func u64ptr(s []uint64) *C.uint64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint64_t)(unsafe.Pointer(&s[0]))
}

func bytesPtr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// durationNs converts a non-negative duration; ok is false for a negative
// one. NoExpiry maps to UINT64_MAX.
func durationNs(d time.Duration) (ns C.uint64_t, ok bool) {
	switch {
	case d == NoExpiry:
		return C.uint64_t(^uint64(0)), true
	case d < 0:
		return 0, false
	}
	return C.uint64_t(d), true
}

func nsDuration(ns C.uint64_t) time.Duration {
	if uint64(ns) > uint64(NoExpiry) {
		return NoExpiry
	}
	return time.Duration(ns)
}

// NoExpiry, as a TTL, means that routes never expire (UINT64_MAX in C).
const NoExpiry = time.Duration(1<<63 - 1)

// blobBytes copies a library blob into Go memory and destroys it.
func blobBytes(b *C.lr_blob) []byte {
	defer C.lr_blob_destroy(b)
	n := int(C.lr_blob_size(b))
	out := make([]byte, n)
	if n > 0 {
		copy(out, unsafe.Slice((*byte)(unsafe.Pointer(C.lr_blob_data(b))), n))
	}
	return out
}
