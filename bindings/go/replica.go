package libroute

/*
#include <libroute.h>
*/
import "C"

// Many gateway replicas, one view of the caches: KV-event batches in
// sequence, load gauges between replicas, snapshot and restore. Deltas
// between replicas are Router.ExportDelta and Router.ImportDelta.

// KVSeq says what a batch's sequence number made of it (lr_kv_seq).
type KVSeq int32

// The lr_kv_seq values.
const (
	KVSeqNone      KVSeq = C.LR_KV_SEQ_NONE      // no sequence number involved
	KVSeqApplied   KVSeq = C.LR_KV_SEQ_APPLIED   // the one expected: applied
	KVSeqFirst     KVSeq = C.LR_KV_SEQ_FIRST     // the source's first: applied
	KVSeqDuplicate KVSeq = C.LR_KV_SEQ_DUPLICATE // applied before: ignored
	KVSeqGap       KVSeq = C.LR_KV_SEQ_GAP       // batches missing: ErrGap
	KVSeqRestart   KVSeq = C.LR_KV_SEQ_RESTART   // the engine restarted
)

// KVSource is one instance's KV-event stream as the router applied it
// (lr_kv_source).
type KVSource struct {
	// HasSeq: a batch was applied since the instance was added or reset.
	HasSeq bool
	// Gap: batches from NextSeq on are missing; later ones are refused
	// until a replay from NextSeq arrives.
	Gap bool
	// NextSeq: the sequence number expected next (replay from here).
	NextSeq uint64
	// Counters since the instance was added.
	Batches, Duplicates, Gaps, Restarts uint64
}

// VLLMBatchSeq applies batch number seq of instance id's engine (the ZMQ
// message's sequence frame) in order and once: a replayed batch is
// ignored (KVSeqDuplicate), a batch past the expected one is ErrGap
// (nothing applied; replay from info.NextSeq), an engine restart (the
// number back, the engine time forward) drops its routes first.
func (r *Router) VLLMBatchSeq(id InstanceID, seq uint64, payload []byte, now uint64) (VLLMBatchInfo, error) {
	h, err := r.acquire()
	if err != nil {
		return VLLMBatchInfo{}, err
	}
	defer r.mu.RUnlock()
	var info C.lr_vllm_batch_info
	C.lr_vllm_batch_info_init_sized(&info, C.sizeof_lr_vllm_batch_info)
	st := C.lr_router_vllm_batch_seq(h, C.uint32_t(id), C.uint64_t(seq),
		bytesPtr(payload), C.size_t(len(payload)), C.uint64_t(now), &info)
	return vllmBatchInfo(&info), check(st, "lr_router_vllm_batch_seq")
}

// KVSource returns instance id's KV-event stream state: whether a gap is
// open and the sequence number to replay from.
func (r *Router) KVSource(id InstanceID) (KVSource, error) {
	h, err := r.acquire()
	if err != nil {
		return KVSource{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_kv_source
	C.lr_kv_source_init_sized(&s, C.sizeof_lr_kv_source)
	if err := check(C.lr_router_kv_source(h, C.uint32_t(id), &s), "lr_router_kv_source"); err != nil {
		return KVSource{}, err
	}
	return KVSource{
		HasSeq:     s.has_seq != 0,
		Gap:        s.gap != 0,
		NextSeq:    uint64(s.next_seq),
		Batches:    uint64(s.batches),
		Duplicates: uint64(s.duplicates),
		Gaps:       uint64(s.gaps),
		Restarts:   uint64(s.restarts),
	}, nil
}

// KVReset says instance id's engine restarted, or its events cannot be
// replayed: its routes are dropped and its next batch starts it anew.
func (r *Router) KVReset(id InstanceID) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_kv_reset(h, C.uint32_t(id)), "lr_router_kv_reset")
}

// ExportGauges returns this replica's in-flight counters per instance as
// a gauge message for the other replicas (ErrState without a ReplicaID).
func (r *Router) ExportGauges() ([]byte, error) {
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	var b *C.lr_blob
	if err := check(C.lr_router_export_gauges(h, &b), "lr_router_export_gauges"); err != nil {
		return nil, err
	}
	return blobBytes(b), nil
}

// SetPeerKey sets the 16-byte key every replica shares: exported deltas
// and gauges are then sealed with it (SipHash-2-4) and only those sealed
// with it are imported (ErrCorrupt otherwise). nil clears it.
func (r *Router) SetPeerKey(key []byte) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_peer_key(h, bytesPtr(key), C.size_t(len(key))),
		"lr_router_set_peer_key")
}

// ImportGauges takes another replica's gauge message: its counts add to
// this router's own in every candidate row until they expire (GaugeTTL)
// or a newer message replaces them.
func (r *Router) ImportGauges(gauges []byte, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_import_gauges(h, bytesPtr(gauges), C.size_t(len(gauges)), C.uint64_t(now)),
		"lr_router_import_gauges")
}

// Snapshot returns the router's learned state (instances, routes with
// trust and ages, engine hashes, sequence and delta watermarks, tuned
// weights, Lodestar's network) as one versioned, checksummed blob.
func (r *Router) Snapshot(now uint64) ([]byte, error) {
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	var b *C.lr_blob
	if err := check(C.lr_router_snapshot(h, C.uint64_t(now), &b), "lr_router_snapshot"); err != nil {
		return nil, err
	}
	return blobBytes(b), nil
}

// Restore loads a snapshot into a router that has no instance yet, all or
// nothing (ErrCorrupt, ErrVersion, ErrState, ...).
func (r *Router) Restore(snapshot []byte, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_restore(h, bytesPtr(snapshot), C.size_t(len(snapshot)), C.uint64_t(now)),
		"lr_router_restore")
}
