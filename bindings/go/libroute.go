// Package libroute is the Go binding of libroute, the C library that picks,
// for each LLM inference request, the engine instance (a vLLM or SGLang
// replica) that should serve it.
//
// The binding is thin: every method is one call into the C API
// (include/libroute/*.h, which remains the reference manual), with
// lr_status turned into a Go error and each handle owned by one Go value
// with a Close method.
//
// # Handles and threads
//
//   - [Router] is safe for concurrent use by many goroutines, as lr_router
//     is. Close waits for calls in progress and later calls return
//     [ErrClosed].
//   - [Index] and [Load] are not safe for concurrent use: one goroutine at a
//     time, with a lock if they are shared.
//   - [Ring] queries (Candidates, Count, Contains) may run concurrently with
//     each other but not with Add, Remove or Close.
//
// Call Close on every handle when done with it. A finalizer frees a handle
// that was dropped without Close, but only as a safety net: the garbage
// collector does not see the C memory behind a handle and may run late.
//
// # Errors
//
// Every failing call returns an [*Error] carrying the lr_status and the C
// function that returned it. Compare with the sentinels:
//
//	if errors.Is(err, libroute.ErrNotFound) { ... }
//
// or take the status with errors.As. A call that fails leaves its handle as
// it was (the C library's promise).
//
// # Time and memory
//
// Timestamps (now, scraped-at, ...) are the host's monotonic clock in
// nanoseconds, as uint64, exactly as the C API takes them; durations (RTT,
// TTL) are time.Duration. Slices passed in are borrowed for the call and
// never kept. Handles use libc's allocator: a custom lr_allocator would
// have to call back into Go for every allocation the library makes, which
// cgo makes slow and which could not hand out Go memory anyway.
package libroute

/*
#cgo pkg-config: libroute
#include <libroute.h>
*/
import "C"

import "errors"

// Version of the headers this package was compiled against.
const (
	HeaderVersionMajor  = C.LR_VERSION_MAJOR
	HeaderVersionMinor  = C.LR_VERSION_MINOR
	HeaderVersionPatch  = C.LR_VERSION_PATCH
	HeaderVersionNumber = C.LR_VERSION_NUMBER
)

// VersionNumber returns LR_VERSION_NUMBER of the library actually loaded
// (major*10000 + minor*100 + patch).
func VersionNumber() uint {
	return uint(C.lr_version_number())
}

// Version returns the version string of the library actually loaded.
func Version() string {
	return C.GoString(C.lr_version_string())
}

// InstanceID names an engine instance: assigned by the router, or chosen by
// the host for a standalone Index, Ring or Load.
type InstanceID uint32

// InstanceNone is never a valid instance id (LR_INSTANCE_NONE).
const InstanceNone InstanceID = C.LR_INSTANCE_NONE

// Status is an lr_status value.
type Status int32

// The lr_status values.
const (
	StatusOK           Status = C.LR_OK
	StatusInvalid      Status = C.LR_EINVAL
	StatusNoMem        Status = C.LR_ENOMEM
	StatusRange        Status = C.LR_ERANGE
	StatusNotFound     Status = C.LR_ENOENT
	StatusExist        Status = C.LR_EEXIST
	StatusLimit        Status = C.LR_ELIMIT
	StatusCorrupt      Status = C.LR_ECORRUPT
	StatusVersion      Status = C.LR_EVERSION
	StatusNotSupported Status = C.LR_ENOTSUP
	StatusState        Status = C.LR_ESTATE
	StatusBufSize      Status = C.LR_EBUFSIZE
	StatusGap          Status = C.LR_EGAP
	StatusBusy         Status = C.LR_EBUSY
	StatusExpired      Status = C.LR_EEXPIRED
)

// String returns the status's symbol name, for example "LR_EINVAL"
// ("LR_UNKNOWN" for a value this library does not know).
func (s Status) String() string {
	return C.GoString(C.lr_status_name(C.lr_status(s)))
}

// Message returns the library's English description of the status.
func (s Status) Message() string {
	return C.GoString(C.lr_strerror(C.lr_status(s)))
}

// Error is a failed libroute call.
type Error struct {
	// Status is what the library returned; a newer library may return a
	// value that has no constant here.
	Status Status
	// Op is the C function that failed, for example "lr_router_route";
	// empty in the sentinels.
	Op string
}

func (e *Error) Error() string {
	if e.Op == "" {
		return "libroute: " + e.Status.Message() + " (" + e.Status.String() + ")"
	}
	return "libroute: " + e.Op + ": " + e.Status.Message() + " (" +
		e.Status.String() + ")"
}

// Is reports whether target is an *Error with the same status and either
// the same Op or no Op, so that errors.Is(err, ErrNotFound) matches any
// LR_ENOENT.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && (t.Op == "" || t.Op == e.Op)
}

// Sentinels for errors.Is, one per status.
var (
	ErrInvalid      error = &Error{Status: StatusInvalid}
	ErrNoMem        error = &Error{Status: StatusNoMem}
	ErrRange        error = &Error{Status: StatusRange}
	ErrNotFound     error = &Error{Status: StatusNotFound}
	ErrExist        error = &Error{Status: StatusExist}
	ErrLimit        error = &Error{Status: StatusLimit}
	ErrCorrupt      error = &Error{Status: StatusCorrupt}
	ErrVersion      error = &Error{Status: StatusVersion}
	ErrNotSupported error = &Error{Status: StatusNotSupported}
	ErrState        error = &Error{Status: StatusState}
	ErrBufSize      error = &Error{Status: StatusBufSize}
	// ErrGap: KV-event batches are missing before this one; replay from
	// the VLLMBatchInfo's NextSeq.
	ErrGap error = &Error{Status: StatusGap}
	// ErrBusy: the fleet is saturated and a request routed with
	// RouteSheddable was refused rather than held; nothing was recorded.
	ErrBusy error = &Error{Status: StatusBusy}
	// ErrExpired: a waiting request's deadline passed before it could be
	// sent (Dispatched.Err of a request Router.Dispatch let out).
	ErrExpired error = &Error{Status: StatusExpired}
)

// ErrClosed is returned by the methods of a handle after its Close.
var ErrClosed = errors.New("libroute: handle is closed")

// check turns a status into an error.
func check(st C.lr_status, op string) error {
	if st == C.LR_OK {
		return nil
	}
	return &Error{Status: Status(st), Op: op}
}

// invalid is the error of an argument the binding rejects before the call,
// for the same reasons the library would.
func invalid(op string) error {
	return &Error{Status: StatusInvalid, Op: op}
}

// Bounds are the range and default of a run-time parameter: values in
// [Lo, Hi] are accepted (others are ErrRange, never clamped); an Integer
// key takes whole numbers only (a fraction is ErrInvalid).
type Bounds struct {
	Lo, Hi, Default float64
	Integer         bool
}

// bounds converts an lr_bounds, its status (ErrNotSupported for an
// unknown key) turned into an error.
func bounds(b C.lr_bounds, op string) (Bounds, error) {
	if err := check(C.lr_status(b.status), op); err != nil {
		return Bounds{}, err
	}
	return Bounds{Lo: float64(b.lo), Hi: float64(b.hi), Default: float64(b.def),
		Integer: b.flags&C.LR_BOUNDS_INTEGER != 0}, nil
}
