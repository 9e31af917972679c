package libroute

/*
#include <stdlib.h>
#include <libroute.h>
*/
import "C"

import (
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
