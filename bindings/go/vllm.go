package libroute

/*
#include <libroute.h>
*/
import "C"

import "runtime"

// VLLMBatchInfo says what a vLLM KV-event batch held and what was done
// with it.
type VLLMBatchInfo struct {
	// The batch's timestamp (engine clock, seconds); 0 when absent.
	Timestamp float64
	// Its data-parallel rank; -1 when absent.
	DPRank int64
	// Events in the batch, and those applied by kind.
	Events, Stored, Removed, Cleared uint32
	// BlockStored events whose parent is unknown here: left out.
	Unplaced uint32
	// Events this index cannot represent (another medium, LoRA, extra
	// keys, other KV groups, unknown types): skipped.
	Skipped uint32
	// Events processed, in order: all of them on success; after a
	// mid-batch ErrLimit or ErrNoMem, the ones applied before the failure
	// (applying the whole batch again is safe).
	Done uint32
	// Events of a type the index applies left out because their fields
	// do not add up.
	Invalid uint32
	// Router.VLLMBatchSeq only: what the sequence number made of the
	// batch, and the number expected next (on ErrGap: replay from it).
	SeqState KVSeq
	NextSeq  uint64
}

func vllmBatchInfo(i *C.lr_vllm_batch_info) VLLMBatchInfo {
	return VLLMBatchInfo{
		Timestamp: float64(i.timestamp),
		DPRank:    int64(i.dp_rank),
		Events:    uint32(i.events),
		Stored:    uint32(i.stored),
		Removed:   uint32(i.removed),
		Cleared:   uint32(i.cleared),
		Unplaced:  uint32(i.unplaced),
		Skipped:   uint32(i.skipped),
		Done:      uint32(i.done),
		Invalid:   uint32(i.invalid),
		SeqState:  KVSeq(i.seq_state),
		NextSeq:   uint64(i.next_seq),
	}
}

// VLLMBatch applies one vLLM KV-event batch (the msgpack payload of one
// ZMQ frame) published by instance. The payload is decoded and checked
// whole before anything is applied (ErrCorrupt, ErrNotSupported: nothing
// applied). The info is returned with errors too: see VLLMBatchInfo.Done.
func (x *Index) VLLMBatch(instance InstanceID, payload []byte, now uint64) (VLLMBatchInfo, error) {
	if x.p == nil {
		return VLLMBatchInfo{}, ErrClosed
	}
	var info C.lr_vllm_batch_info
	C.lr_vllm_batch_info_init_sized(&info, C.sizeof_lr_vllm_batch_info)
	st := C.lr_index_vllm_batch(x.p, C.uint32_t(instance), bytesPtr(payload),
		C.size_t(len(payload)), C.uint64_t(now), &info)
	runtime.KeepAlive(x)
	return vllmBatchInfo(&info), check(st, "lr_index_vllm_batch")
}

// VLLMBatch applies one vLLM KV-event batch from instance id to the
// router's index, as Index.VLLMBatch does. Route with RouteNoLearn when
// the engines' events are the source of truth.
func (r *Router) VLLMBatch(id InstanceID, payload []byte, now uint64) (VLLMBatchInfo, error) {
	h, err := r.acquire()
	if err != nil {
		return VLLMBatchInfo{}, err
	}
	defer r.mu.RUnlock()
	var info C.lr_vllm_batch_info
	C.lr_vllm_batch_info_init_sized(&info, C.sizeof_lr_vllm_batch_info)
	st := C.lr_router_vllm_batch(h, C.uint32_t(id), bytesPtr(payload),
		C.size_t(len(payload)), C.uint64_t(now), &info)
	return vllmBatchInfo(&info), check(st, "lr_router_vllm_batch")
}
