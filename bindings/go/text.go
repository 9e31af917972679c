package libroute

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// TextMaxWidth is the widest pseudo-token, in bytes.
const TextMaxWidth = C.LR_TEXT_MAX_WIDTH

// TextTokens cuts text into pseudo-tokens of width bytes (1..TextMaxWidth;
// 4 is close to a real tokenizer's average on English), for hosts without
// a tokenizer: equal text prefixes give equal token prefixes.
func TextTokens(text []byte, width uint32) ([]uint32, error) {
	const op = "lr_text_tokens"
	var p unsafe.Pointer
	if len(text) > 0 {
		p = unsafe.Pointer(&text[0])
	}
	var n C.size_t
	st := C.lr_text_tokens(p, C.size_t(len(text)), C.uint32_t(width), nil, 0, &n)
	if st != C.LR_OK && st != C.LR_EBUFSIZE {
		return nil, check(st, op)
	}
	out := make([]uint32, int(n))
	st = C.lr_text_tokens(p, C.size_t(len(text)), C.uint32_t(width), u32ptr(out),
		C.size_t(len(out)), &n)
	if err := check(st, op); err != nil {
		return nil, err
	}
	return out[:n], nil
}

// TextTokensAppend appends the pseudo-tokens of text to dst and returns
// the extended slice, as TextTokens cuts them, in one call into the
// library, writing into dst's room when it has enough: for a host that
// cuts each message of every request into one buffer (the token count is
// ceil(len(text) / width)).
// On error dst is returned unchanged.
func TextTokensAppend(dst []uint32, text []byte, width uint32) ([]uint32, error) {
	const op = "lr_text_tokens"
	if width == 0 || width > TextMaxWidth || uint64(len(text)) > C.LR_TEXT_MAX_BYTES {
		return dst, invalid(op)
	}
	n := (len(text) + int(width) - 1) / int(width)
	if n == 0 {
		return dst, nil
	}
	if cap(dst)-len(dst) < n {
		grown := make([]uint32, len(dst), 2*cap(dst)+n)
		copy(grown, dst)
		dst = grown
	}
	out := dst[len(dst) : len(dst)+n]
	// The shim keeps lr_text_tokens' count on its stack (it is n).
	st := C.lrgo_text_tokens(unsafe.Pointer(&text[0]), C.size_t(len(text)), C.uint32_t(width),
		u32ptr(out), C.size_t(n))
	if err := check(st, op); err != nil {
		return dst, err
	}
	return dst[:len(dst)+n], nil
}
