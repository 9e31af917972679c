package libroute

/*
#include <stdlib.h>
#include <libroute.h>
*/
import "C"

import "runtime"

// RingMaxK is the most candidates one query returns.
const RingMaxK = C.LR_RING_MAX_K

// RingOptions are fixed when a Ring is created. Zero fields mean the
// library's defaults.
type RingOptions struct {
	// Virtual nodes per instance.
	Vnodes uint32
	// Most instances on the ring.
	MaxInstances uint32
}

// Ring is a standalone dual consistent-hash ring (lr_ring): instances are
// placed by name, so every process that knows the same names computes the
// same candidates. Candidates, Count and Contains may run concurrently
// with each other, but not with Add, Remove or Close.
type Ring struct {
	p *C.lr_ring
}

// NewRing creates an empty ring; nil options mean the defaults.
func NewRing(opt *RingOptions) (*Ring, error) {
	var co *C.lr_ring_options
	if opt != nil {
		var o C.lr_ring_options
		C.lr_ring_options_init_sized(&o, C.sizeof_lr_ring_options)
		if opt.Vnodes != 0 {
			o.vnodes = C.uint32_t(opt.Vnodes)
		}
		if opt.MaxInstances != 0 {
			o.max_instances = C.uint32_t(opt.MaxInstances)
		}
		co = &o
	}
	var p *C.lr_ring
	if err := check(C.lr_ring_create(co, &p), "lr_ring_create"); err != nil {
		return nil, err
	}
	r := &Ring{p: p}
	runtime.SetFinalizer(r, (*Ring).Close)
	return r, nil
}

// Close destroys the ring. Closing twice is a no-op.
func (r *Ring) Close() error {
	if r.p != nil {
		C.lr_ring_destroy(r.p)
		r.p = nil
		runtime.SetFinalizer(r, nil)
	}
	return nil
}

// Add places an instance on the ring under a name (1..255 bytes).
func (r *Ring) Add(name string, id InstanceID) error {
	const op = "lr_ring_add"
	if r.p == nil {
		return ErrClosed
	}
	cs, err := cstring(name, op)
	if err != nil {
		return err
	}
	defer freeCString(cs)
	st := C.lr_ring_add(r.p, cs, C.uint32_t(id))
	runtime.KeepAlive(r)
	return check(st, op)
}

// Remove takes an instance off the ring.
func (r *Ring) Remove(id InstanceID) error {
	if r.p == nil {
		return ErrClosed
	}
	st := C.lr_ring_remove(r.p, C.uint32_t(id))
	runtime.KeepAlive(r)
	return check(st, "lr_ring_remove")
}

// Count returns the instances on the ring.
func (r *Ring) Count() int {
	if r.p == nil {
		return 0
	}
	n := C.lr_ring_count(r.p)
	runtime.KeepAlive(r)
	return int(n)
}

// Contains reports whether an id is on the ring.
func (r *Ring) Contains(id InstanceID) bool {
	if r.p == nil {
		return false
	}
	in := C.lr_ring_contains(r.p, C.uint32_t(id))
	runtime.KeepAlive(r)
	return in != 0
}

// Candidates returns the k (1..RingMaxK) distinct candidates for a key, in
// hash-function order; fewer when fewer instances are on the ring. An
// empty ring is ErrState.
func (r *Ring) Candidates(key uint64, k int) ([]InstanceID, error) {
	const op = "lr_ring_candidates"
	if r.p == nil {
		return nil, ErrClosed
	}
	if k < 1 || k > RingMaxK {
		return nil, invalid(op)
	}
	var out [RingMaxK]C.uint32_t
	var n C.uint32_t
	st := C.lr_ring_candidates(r.p, C.uint64_t(key), C.uint32_t(k), &out[0], &n)
	runtime.KeepAlive(r)
	if err := check(st, op); err != nil {
		return nil, err
	}
	ids := make([]InstanceID, int(n))
	for i := range ids {
		ids[i] = InstanceID(out[i])
	}
	return ids, nil
}
