package libroute

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// Trust says where a route came from: the gateway's own routing (local) or
// a peer replica (remote). Remote routes are evicted first.
type Trust int32

// The trust levels.
const (
	TrustLocal  Trust = C.LR_TRUST_LOCAL
	TrustRemote Trust = C.LR_TRUST_REMOTE
)

// IndexOptions are fixed when an Index is created. Zero fields mean the
// library's defaults (lr_index.h lists them).
type IndexOptions struct {
	// Seed of the in-process hash tables; block keys do not depend on it.
	Seed uint64
	// Most block routes held at once.
	CapacityBlocks uint64
	// Routes unused this long expire; NoExpiry: never.
	TTL time.Duration
	// Tokens per block.
	BlockTokens uint32
	// Distinct instance ids tracked.
	MaxInstances uint32
	// Local learns remembered for ExportDelta; ^uint32(0) disables the
	// journal (every export is then full).
	JournalCapacity uint32
	// Engine-hash entries kept for KV events, over all instances; 0:
	// twice CapacityBlocks.
	EngineMapCapacity uint64
	// This replica's id, stamped on exported deltas (0: none); a delta
	// carrying it is this index's own echo and changes nothing.
	ReplicaID uint64
	// REMOTE routes unused this long expire; 0: TTL.
	RemoteTTL time.Duration
	// What a full index drops first: EvictRemoteFirst (the default) or
	// EvictLRU (replicas sharing deltas).
	Eviction Eviction
	// How far ahead of the newest time the index has taken a call's time
	// may be; a call further ahead is ErrRange and changes nothing (a
	// clock that really moved is taken at the next call that agrees).
	// 0: 60 s; NoExpiry: only the MaxTime bound.
	ClockSkew time.Duration
}

// MaxTime is the latest timestamp any handle takes (LR_MAX_TIME_NS, 2^60
// ns): times are a monotonic clock, never a wall clock in nanoseconds.
const MaxTime uint64 = C.LR_MAX_TIME_NS

// Eviction is an lr_eviction: what a full index drops first.
type Eviction int32

// The lr_eviction values.
const (
	EvictRemoteFirst Eviction = C.LR_EVICT_REMOTE_FIRST
	EvictLRU         Eviction = C.LR_EVICT_LRU
)

// Tier is an lr_tier: the memory tier of an engine's KV cache a block is
// on (vLLM's medium): the GPU's own, or a lower tier an offloading
// connector copied it to. A hit on a lower tier costs a transfer, not a
// recompute.
type Tier int32

// The lr_tier values.
const (
	TierGPU  Tier = C.LR_TIER_GPU
	TierCPU  Tier = C.LR_TIER_CPU
	TierDisk Tier = C.LR_TIER_DISK
)

// Index is a standalone prefix index (lr_index): which instance caches
// which token prefix. The router has its own; this one is for hosts that
// route by themselves. Not safe for concurrent use.
type Index struct {
	p *C.lr_index
}

// NewIndex creates an index; nil options mean the defaults.
func NewIndex(opt *IndexOptions) (*Index, error) {
	const op = "lr_index_create"
	var co *C.lr_index_options
	if opt != nil {
		var o C.lr_index_options
		C.lr_index_options_init_sized(&o, C.sizeof_lr_index_options)
		if opt.TTL != 0 {
			ttl, ok := durationNs(opt.TTL)
			if !ok {
				return nil, invalid(op)
			}
			o.ttl_ns = ttl
		}
		if opt.Seed != 0 {
			o.seed = C.uint64_t(opt.Seed)
		}
		if opt.CapacityBlocks != 0 {
			o.capacity_blocks = C.uint64_t(opt.CapacityBlocks)
		}
		if opt.BlockTokens != 0 {
			o.block_tokens = C.uint32_t(opt.BlockTokens)
		}
		if opt.MaxInstances != 0 {
			o.max_instances = C.uint32_t(opt.MaxInstances)
		}
		if opt.JournalCapacity != 0 {
			o.journal_capacity = C.uint32_t(opt.JournalCapacity)
		}
		if opt.EngineMapCapacity != 0 {
			o.engine_map_capacity = C.uint64_t(opt.EngineMapCapacity)
		}
		o.replica_id = C.uint64_t(opt.ReplicaID)
		o.eviction = C.int32_t(opt.Eviction)
		if opt.RemoteTTL != 0 {
			rttl, ok := durationNs(opt.RemoteTTL)
			if !ok {
				return nil, invalid(op)
			}
			o.remote_ttl_ns = rttl
		}
		if opt.ClockSkew != 0 {
			skew, ok := durationNs(opt.ClockSkew)
			if !ok {
				return nil, invalid(op)
			}
			o.clock_skew_ns = skew
		}
		co = &o
	}
	var p *C.lr_index
	if err := check(C.lr_index_create(co, &p), op); err != nil {
		return nil, err
	}
	x := &Index{p: p}
	runtime.SetFinalizer(x, (*Index).Close)
	return x, nil
}

// Close destroys the index. Closing twice is a no-op.
func (x *Index) Close() error {
	if x.p != nil {
		C.lr_index_destroy(x.p)
		x.p = nil
		runtime.SetFinalizer(x, nil)
	}
	return nil
}

// BlockKeys returns the chained block keys of a token sequence: key d names
// the prefix made of blocks 0..d. Only complete blocks get a key. The keys
// are the same in every process and release (lr_index.h gives the formula).
func BlockKeys(blockTokens uint32, tokens []uint32, tenantSalt uint64) ([]uint64, error) {
	const op = "lr_block_keys"
	var n C.size_t
	st := C.lr_block_keys(C.uint32_t(blockTokens), u32ptr(tokens), C.size_t(len(tokens)),
		C.uint64_t(tenantSalt), nil, 0, &n)
	if st != C.LR_OK && st != C.LR_EBUFSIZE {
		return nil, check(st, op)
	}
	keys := make([]uint64, int(n))
	st = C.lr_block_keys(C.uint32_t(blockTokens), u32ptr(tokens), C.size_t(len(tokens)),
		C.uint64_t(tenantSalt), u64ptr(keys), C.size_t(len(keys)), &n)
	if err := check(st, op); err != nil {
		return nil, err
	}
	return keys[:n], nil
}

// NameHash returns the 64-bit hash the library keys a name by (a model, a
// LoRA adapter, a cache salt; lr_name_hash): 0 for "", never 0 otherwise.
// Router.Adapters reports adapters by it, and NameHash(cacheSalt) is the
// TenantSalt of a vLLM request with that cache salt.
func NameHash(name string) uint64 {
	if len(name) == 0 {
		return uint64(C.lr_name_hash(nil, 0))
	}
	b := []byte(name)
	return uint64(C.lr_name_hash((*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b))))
}

// AdapterSalt returns the salt a prompt's blocks are keyed with under the
// LoRA adapter whose NameHash is adapterHash (lr_adapter_salt): tenantSalt
// itself for 0, the base model. BlockKeys with it gives the keys a router
// gives a request for that adapter.
func AdapterSalt(tenantSalt, adapterHash uint64) uint64 {
	return uint64(C.lr_adapter_salt(C.uint64_t(tenantSalt), C.uint64_t(adapterHash)))
}

// MMKeyHash returns the key a multimodal input adds to one block
// (lr_mm_key_hash), as vLLM lists it in the block's extra keys: offset is
// the input's first placeholder token minus the block's first token
// (negative when the input began in an earlier block). A block's
// multimodal hash, what KVStored.MMHashes holds per block, is the XOR of
// its keys' hashes (0 with none).
func MMKeyHash(identifier string, offset int64) uint64 {
	if len(identifier) == 0 {
		return uint64(C.lr_mm_key_hash(nil, 0, C.int64_t(offset)))
	}
	b := []byte(identifier)
	return uint64(C.lr_mm_key_hash((*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)),
		C.int64_t(offset)))
}

// IndexMaxMMIdentifier is the most bytes an MMInput.Identifier may hold.
const IndexMaxMMIdentifier = C.LR_INDEX_MAX_MM_IDENTIFIER

// MMInput is one multimodal input of a prompt (lr_mm_input): an image, an
// audio clip. Its placeholder tokens are [Offset, Offset+Length) of the
// prompt. Identifier (1..IndexMaxMMIdentifier bytes, no NUL) is the
// engine's name for its data: vLLM's mm_feature.identifier, the hash of
// the data, or the uuid the client gave it. Each full block the
// placeholder overlaps gets MMKeyHash(Identifier, Offset - the block's
// first token), so the same placeholder tokens with another input, or the
// input at another place, never match.
type MMInput struct {
	Identifier string
	Offset     uint32
	Length     uint32
}

// mmInputs copies inputs to one C allocation for a call (an lr_mm_input
// array followed by the identifiers, NUL-terminated): a Go struct passed
// to C may not point to Go memory that holds pointers. Each identifier is
// cut at IndexMaxMMIdentifier+1 bytes, so one too long is still the
// library's LR_EINVAL. Free the result with freeMM; nil for no inputs.
// A NUL in an identifier would cut it short in C: ErrInvalid.
func mmInputs(in []MMInput, op string) (*C.lr_mm_input, error) {
	if len(in) == 0 {
		return nil, nil
	}
	head := uintptr(len(in)) * unsafe.Sizeof(C.lr_mm_input{})
	size := head
	for i := range in {
		id := in[i].Identifier
		if strings.IndexByte(id, 0) >= 0 {
			return nil, invalid(op)
		}
		size += uintptr(mmIDLen(id)) + 1
	}
	base := C.malloc(C.size_t(size))
	if base == nil {
		return nil, check(C.LR_ENOMEM, op)
	}
	arr := unsafe.Slice((*C.lr_mm_input)(base), len(in))
	buf := unsafe.Slice((*byte)(base), size)
	at := head
	for i := range in {
		id := in[i].Identifier
		n := mmIDLen(id)
		copy(buf[at:at+uintptr(n)], id[:n])
		buf[at+uintptr(n)] = 0
		arr[i].identifier = (*C.char)(unsafe.Pointer(&buf[at]))
		arr[i].offset = C.uint32_t(in[i].Offset)
		arr[i].length = C.uint32_t(in[i].Length)
		at += uintptr(n) + 1
	}
	return (*C.lr_mm_input)(base), nil
}

func mmIDLen(id string) int {
	if len(id) > IndexMaxMMIdentifier+1 {
		return IndexMaxMMIdentifier + 1
	}
	return len(id)
}

func freeMM(p *C.lr_mm_input) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// Prompt is a prompt as the index sees it. Its slices are borrowed for the
// call.
type Prompt struct {
	// Token ids; their count is the prompt's length.
	Tokens []uint32
	// Message ends as token offsets, ascending; used by Learn.
	Boundaries []uint32
	// Enters every key: prefixes of different tenants never match.
	TenantSalt uint64
	// Optional keys from BlockKeys (same block size and salt), so that a
	// prompt matched and then learned is hashed once. When set, the token
	// values are not read and len(Keys) must be len(Tokens)/block size.
	Keys []uint64
	// Its multimodal inputs, by ascending Offset, none overlapping another,
	// each inside the prompt (else ErrInvalid): their keys enter the blocks
	// they overlap, as vLLM's do. Not with Keys (ErrInvalid).
	MM []MMInput
}

// c is p for a shim, with its multimodal inputs in C memory: release them
// with freeMM(q.mm) after the call.
func (p *Prompt) c(op string) (C.lr_prompt, error) {
	var q C.lr_prompt
	C.lr_prompt_init_sized(&q, C.sizeof_lr_prompt)
	q.n_tokens = C.size_t(len(p.Tokens))
	q.n_boundaries = C.size_t(len(p.Boundaries))
	q.tenant_salt = C.uint64_t(p.TenantSalt)
	q.n_keys = C.size_t(len(p.Keys))
	mm, err := mmInputs(p.MM, op)
	if err != nil {
		return q, err
	}
	q.mm = mm
	q.n_mm = C.size_t(len(p.MM))
	return q, nil
}

// Learn records that instance now holds the prompt, at each boundary and
// at its full length (aligned down to blocks).
func (x *Index) Learn(p *Prompt, instance InstanceID, trust Trust, now uint64) error {
	const op = "lr_index_learn"
	if x.p == nil {
		return ErrClosed
	}
	q, err := p.c(op)
	if err != nil {
		return err
	}
	defer freeMM(q.mm)
	st := C.lrgo_index_learn(x.p, &q, u32ptr(p.Tokens), u32ptr(p.Boundaries), u64ptr(p.Keys),
		C.uint32_t(instance), C.int32_t(trust), C.uint64_t(now))
	runtime.KeepAlive(x)
	return check(st, op)
}

// Hit is one instance's cached prefix of a prompt.
type Hit struct {
	Instance InstanceID
	// Leading tokens cached there, a multiple of the block size.
	Tokens uint32
}

// Hit is passed to C as an lr_index_hit array: the layouts must agree.
var (
	_ [unsafe.Sizeof(Hit{}) - C.sizeof_lr_index_hit]struct{}
	_ [C.sizeof_lr_index_hit - unsafe.Sizeof(Hit{})]struct{}
	_ [unsafe.Offsetof(Hit{}.Tokens) - unsafe.Offsetof(C.lr_index_hit{}.tokens)]struct{}
	_ [unsafe.Offsetof(C.lr_index_hit{}.tokens) - unsafe.Offsetof(Hit{}.Tokens)]struct{}
)

// MatchFlags modify Match.
type MatchFlags uint32

// MatchNoTouch leaves the matched routes' recency alone (a dry run).
const MatchNoTouch MatchFlags = C.LR_MATCH_NO_TOUCH

// MatchTierCPU and MatchTierDisk answer for the blocks the instances hold
// on a lower tier (KVStored.Tier) instead of the GPU's; at most one of
// them. No hit before the tier's first event.
const (
	MatchTierCPU  MatchFlags = C.LR_MATCH_TIER_CPU
	MatchTierDisk MatchFlags = C.LR_MATCH_TIER_DISK
)

// MatchResult is the outcome of a match.
type MatchResult struct {
	// Instances with a non-empty match, deepest first, then by id.
	Hits []Hit
	// The deepest match over all instances, in tokens.
	DeepestTokens uint64
	// Complete blocks in the prompt.
	PromptBlocks uint64
}

// Match returns, for every instance, the longest prefix of the prompt it
// holds. Expired routes are dropped first.
func (x *Index) Match(p *Prompt, now uint64, flags MatchFlags) (MatchResult, error) {
	var m MatchResult
	err := x.MatchInto(p, now, flags, &m)
	return m, err
}

// MatchInto is Match writing into m, reusing the capacity of m.Hits.
func (x *Index) MatchInto(p *Prompt, now uint64, flags MatchFlags, m *MatchResult) error {
	const op = "lr_index_match"
	if x.p == nil {
		return ErrClosed
	}
	q, err := p.c(op)
	if err != nil {
		return err
	}
	defer freeMM(q.mm)
	hits := m.Hits[:cap(m.Hits)]
	if len(hits) == 0 {
		hits = make([]Hit, 16)
	}
	var res C.lr_index_match_result
	for {
		C.lr_index_match_result_init_sized(&res, C.sizeof_lr_index_match_result)
		res.hits_capacity = C.size_t(len(hits))
		res.hit_size = C.sizeof_lr_index_hit
		st := C.lrgo_index_match(x.p, &q, u32ptr(p.Tokens), u64ptr(p.Keys), C.uint64_t(now),
			C.uint32_t(flags), (*C.lr_index_hit)(unsafe.Pointer(&hits[0])), &res)
		runtime.KeepAlive(x)
		// Too small a buffer changes nothing (but expiry), and no one else
		// may use the index meanwhile: one retry at the size asked for fits.
		if st == C.LR_EBUFSIZE && int(res.n_hits) > len(hits) {
			hits = make([]Hit, int(res.n_hits))
			continue
		}
		if err := check(st, op); err != nil {
			return err
		}
		break
	}
	m.Hits = hits[:int(res.n_hits)]
	m.DeepestTokens = uint64(res.deepest_tokens)
	m.PromptBlocks = uint64(res.prompt_blocks)
	return nil
}

// RemoveInstance drops every route of an instance and forgets its id.
func (x *Index) RemoveInstance(instance InstanceID) error {
	if x.p == nil {
		return ErrClosed
	}
	st := C.lr_index_remove_instance(x.p, C.uint32_t(instance))
	runtime.KeepAlive(x)
	return check(st, "lr_index_remove_instance")
}

// Expire drops every route unused for longer than the TTL.
func (x *Index) Expire(now uint64) error {
	if x.p == nil {
		return ErrClosed
	}
	st := C.lr_index_expire(x.p, C.uint64_t(now))
	runtime.KeepAlive(x)
	return check(st, "lr_index_expire")
}

// KVStored is an engine's BlockStored event (vLLM's schema). Its slices are
// borrowed for the call.
type KVStored struct {
	// Engine hashes of the stored blocks.
	BlockHashes []uint64
	// Engine hash of the block before the first, when HasParent.
	ParentHash uint64
	HasParent  bool
	// Engine tokens per block: a multiple of the index's block size.
	BlockSize uint32
	// len(BlockHashes) * BlockSize token ids.
	TokenIDs []uint32
	// As Prompt.TenantSalt (a LoRA, say).
	TenantSalt uint64
	// The tier the engine stored the blocks on (TierGPU, the zero value).
	// A lower tier's store goes to that tier's routes: with no TokenIDs
	// (BlockSize 0, as vLLM's offloading connector sends) each hash names
	// a block the instance stored on the GPU before, whose chain the tier
	// takes (ErrNotFound when none is known); with TokenIDs it is keyed as
	// on the GPU.
	Tier Tier
	// Nil, or one per block hash: block j's multimodal hash, the XOR of
	// MMKeyHash over the (identifier, offset) pairs vLLM's extra_keys list
	// for it (0: none). Another length is ErrInvalid. A nonzero one needs
	// BlockSize equal to the index's block size (else ErrNotSupported).
	MMHashes []uint64
}

// mmHashes is ev.MMHashes for a shim; ok is false when their count is not
// the blocks' (the library reads one per block).
func (ev *KVStored) mmHashes() (p *C.uint64_t, ok bool) {
	if ev.MMHashes == nil {
		return nil, true
	}
	if len(ev.MMHashes) != len(ev.BlockHashes) {
		return nil, false
	}
	return u64ptr(ev.MMHashes), true
}

func (ev *KVStored) c() C.lr_kv_stored {
	var e C.lr_kv_stored
	C.lr_kv_stored_init_sized(&e, C.sizeof_lr_kv_stored)
	e.n_blocks = C.size_t(len(ev.BlockHashes))
	e.parent_hash = C.uint64_t(ev.ParentHash)
	e.has_parent = cbool(ev.HasParent)
	e.block_size = C.uint32_t(ev.BlockSize)
	e.n_tokens = C.size_t(len(ev.TokenIDs))
	e.tenant_salt = C.uint64_t(ev.TenantSalt)
	e.tier = C.int32_t(ev.Tier)
	return e
}

// KVStored applies a BlockStored event for instance.
func (x *Index) KVStored(instance InstanceID, ev *KVStored, now uint64) error {
	const op = "lr_index_kv_stored"
	if x.p == nil {
		return ErrClosed
	}
	e := ev.c()
	mm, ok := ev.mmHashes()
	if !ok {
		return invalid(op)
	}
	st := C.lrgo_index_kv_stored(x.p, C.uint32_t(instance), &e, u64ptr(ev.BlockHashes),
		u32ptr(ev.TokenIDs), mm, C.uint64_t(now))
	runtime.KeepAlive(x)
	return check(st, op)
}

// KVRemoved applies a BlockRemoved event and returns how many of the
// hashes were known.
func (x *Index) KVRemoved(instance InstanceID, blockHashes []uint64) (resolved int, err error) {
	if x.p == nil {
		return 0, ErrClosed
	}
	var n C.size_t
	st := C.lr_index_kv_removed(x.p, C.uint32_t(instance), u64ptr(blockHashes),
		C.size_t(len(blockHashes)), &n)
	runtime.KeepAlive(x)
	if err := check(st, "lr_index_kv_removed"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// KVRemovedTier applies a BlockRemoved event on one tier
// (lr_index_kv_removed_tier): TierGPU is KVRemoved; a lower tier drops the
// blocks, and the instance's deeper ones there, from that tier only (a GPU
// removal leaves the lower tiers' copies). It returns how many of the
// hashes were known there.
func (x *Index) KVRemovedTier(instance InstanceID, tier Tier, blockHashes []uint64) (resolved int, err error) {
	if x.p == nil {
		return 0, ErrClosed
	}
	var n C.size_t
	st := C.lr_index_kv_removed_tier(x.p, C.uint32_t(instance), C.int32_t(tier),
		u64ptr(blockHashes), C.size_t(len(blockHashes)), &n)
	runtime.KeepAlive(x)
	if err := check(st, "lr_index_kv_removed_tier"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// KVCleared applies an AllBlocksCleared event (on every tier).
func (x *Index) KVCleared(instance InstanceID) error {
	if x.p == nil {
		return ErrClosed
	}
	st := C.lr_index_kv_cleared(x.p, C.uint32_t(instance))
	runtime.KeepAlive(x)
	return check(st, "lr_index_kv_cleared")
}

// Mark returns the position of the local-learn journal, for a later
// ExportDelta (0 after Close).
func (x *Index) Mark() uint64 {
	if x.p == nil {
		return 0
	}
	m := C.lr_index_mark(x.p)
	runtime.KeepAlive(x)
	return uint64(m)
}

// ExportDelta returns what was learned locally since sinceMark (0:
// everything held locally) as bytes for other replicas, and the mark to
// pass next time.
func (x *Index) ExportDelta(sinceMark uint64) (delta []byte, mark uint64, err error) {
	if x.p == nil {
		return nil, 0, ErrClosed
	}
	var b *C.lr_blob
	var m C.uint64_t
	st := C.lr_index_export_delta(x.p, C.uint64_t(sinceMark), &b, &m)
	runtime.KeepAlive(x)
	if err := check(st, "lr_index_export_delta"); err != nil {
		return nil, 0, err
	}
	return blobBytes(b), uint64(m), nil
}

// ImportDelta applies a delta from another replica as remote routes.
func (x *Index) ImportDelta(delta []byte, now uint64) error {
	if x.p == nil {
		return ErrClosed
	}
	st := C.lr_index_import_delta(x.p, bytesPtr(delta), C.size_t(len(delta)), C.uint64_t(now))
	runtime.KeepAlive(x)
	return check(st, "lr_index_import_delta")
}

// IndexStats are an index's counters.
type IndexStats struct {
	Blocks        uint64 // block routes held now
	RemoteBlocks  uint64 // of which remote
	Prefixes      uint64 // distinct prefix keys held by anyone
	Instances     uint64 // instance ids tracked
	EngineHashes  uint64 // live engine hashes
	Bytes         uint64 // bytes allocated
	EvictedBlocks uint64 // cumulative: dropped for capacity
	ExpiredBlocks uint64 // cumulative: dropped by TTL
	LearnedBlocks uint64 // cumulative: routes added
}

// Stats returns the index's counters. Counting engine hashes walks a map.
func (x *Index) Stats() (IndexStats, error) {
	if x.p == nil {
		return IndexStats{}, ErrClosed
	}
	// lr_index_stats is the one size-prefixed struct without an init
	// function; LR_*_INIT stamps sizeof as the headers see it, as here.
	var s C.lr_index_stats
	s.struct_size = C.sizeof_lr_index_stats
	st := C.lr_index_get_stats(x.p, &s)
	runtime.KeepAlive(x)
	if err := check(st, "lr_index_get_stats"); err != nil {
		return IndexStats{}, err
	}
	return indexStats(&s), nil
}

// indexStats converts lr_index_stats.
func indexStats(s *C.lr_index_stats) IndexStats {
	return IndexStats{
		Blocks:        uint64(s.blocks),
		RemoteBlocks:  uint64(s.remote_blocks),
		Prefixes:      uint64(s.prefixes),
		Instances:     uint64(s.instances),
		EngineHashes:  uint64(s.engine_hashes),
		Bytes:         uint64(s.bytes),
		EvictedBlocks: uint64(s.evicted_blocks),
		ExpiredBlocks: uint64(s.expired_blocks),
		LearnedBlocks: uint64(s.learned_blocks),
	}
}

// InstanceBlocks returns the block routes one instance holds.
func (x *Index) InstanceBlocks(instance InstanceID) (uint64, error) {
	if x.p == nil {
		return 0, ErrClosed
	}
	var n C.uint64_t
	st := C.lr_index_instance_blocks(x.p, C.uint32_t(instance), &n)
	runtime.KeepAlive(x)
	if err := check(st, "lr_index_instance_blocks"); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// BlockTokens returns the index's tokens per block (0 after Close).
func (x *Index) BlockTokens() uint32 {
	if x.p == nil {
		return 0
	}
	n := C.lr_index_block_tokens(x.p)
	runtime.KeepAlive(x)
	return uint32(n)
}
