package libroute

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
)

const sec = uint64(1_000_000_000)

// conversation is a chat whose every turn sends the whole history.
type conversation struct {
	tokens     []uint32
	boundaries []uint32 // message ends
}

func (c *conversation) push(rng *rand.Rand, n int, salt uint32) {
	for i := 0; i < n; i++ {
		c.tokens = append(c.tokens, uint32(rng.Intn(50000))^salt)
	}
	c.boundaries = append(c.boundaries, uint32(len(c.tokens)))
}

// newConversations starts n chats, each on one of a few shared system
// prompts (the same tokens for the same prompt).
func newConversations(rng *rand.Rand, n int) []*conversation {
	var system [3][]uint32
	for s := range system {
		sr := rand.New(rand.NewSource(int64(1000 + s)))
		for i := 0; i < 200+100*s; i++ {
			system[s] = append(system[s], uint32(sr.Intn(50000)))
		}
	}
	cs := make([]*conversation, n)
	for i := range cs {
		s := system[rng.Intn(len(system))]
		c := &conversation{tokens: append([]uint32(nil), s...)}
		c.boundaries = []uint32{uint32(len(c.tokens))}
		cs[i] = c
	}
	return cs
}

func newTestRouter(t *testing.T, policy Policy, names ...string) (*Router, []InstanceID) {
	t.Helper()
	o := DefaultRouterOptions()
	o.Policy = policy
	o.Seed = 7
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatalf("NewRouter(%v): %v", policy, err)
	}
	t.Cleanup(func() { r.Close() })
	ids := make([]InstanceID, len(names))
	for i, n := range names {
		if ids[i], err = r.AddInstance(InstanceSpec{Name: n}); err != nil {
			t.Fatalf("AddInstance(%q): %v", n, err)
		}
	}
	return r, ids
}

func instanceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.0.%d:8000", i+1)
	}
	return names
}

// wantStatus fails unless err is an *Error with status want, matched by
// errors.Is against sentinel and by no other sentinel.
func wantStatus(t *testing.T, err error, sentinel error, want Status, op string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want %v", op, want)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: errors.Is(%v, %v) is false", op, err, sentinel)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v is not an *Error", op, err)
	}
	if e.Status != want || e.Op != op {
		t.Fatalf("got status %v op %q, want %v op %q", e.Status, e.Op, want, op)
	}
	for _, other := range allSentinels {
		if other != sentinel && errors.Is(err, other) {
			t.Fatalf("%v also matches %v", err, other)
		}
	}
}

var allSentinels = []error{
	ErrInvalid, ErrNoMem, ErrRange, ErrNotFound, ErrExist, ErrLimit,
	ErrCorrupt, ErrVersion, ErrNotSupported, ErrState, ErrBufSize, ErrGap,
	ErrBusy, ErrExpired,
}
