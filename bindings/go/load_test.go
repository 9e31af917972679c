package libroute

import (
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	l, err := NewLoad(&LoadOptions{MaxInstances: 8, MaxRequests: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := InstanceID(0); i < 3; i++ {
		if err := l.AddInstance(i, uint32(i), i != 2); err != nil {
			t.Fatal(err)
		}
	}
	wantStatus(t, l.AddInstance(1, 0, true), ErrExist, StatusExist, "lr_load_add_instance")
	wantStatus(t, l.AddInstance(8, 0, true), ErrLimit, StatusLimit, "lr_load_add_instance")

	d := &Dispatch{RequestID: 1, Instance: 0, PromptTokens: 900, CachedTokens: 512,
		ExpectedOutputTokens: 100, HasAlt: true, AltInstance: 1, AltCachedTokens: 0, Now: sec}
	if err := l.Dispatch(d); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, l.Dispatch(d), ErrExist, StatusExist, "lr_load_dispatch")
	if err := l.Dispatch(&Dispatch{RequestID: 2, Instance: 2, PromptTokens: 100, Now: sec}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, l.Dispatch(&Dispatch{RequestID: 3, Instance: 2, PromptTokens: 10, CachedTokens: 11}),
		ErrInvalid, StatusInvalid, "lr_load_dispatch")
	s, err := l.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Inflight != 1 || s.Queued != 1 || s.PrefillTokens != 388 || s.QueuedTokens != 900 ||
		s.KVTokens != 1000 || s.PromptTokens != 900 || !s.PrefixCaching || s.QueueSince != sec {
		t.Errorf("snapshot %+v", s)
	}
	if l.Inflight() != 2 {
		t.Errorf("Inflight() = %d", l.Inflight())
	}
	if inst, queued, err := l.Request(1); err != nil || inst != 0 || !queued {
		t.Errorf("Request(1) = %d %v %v", inst, queued, err)
	}
	// Move to the alternative, then start decoding there.
	if err := l.Move(1, 1, 256); err != nil {
		t.Fatal(err)
	}
	if inst, _, _ := l.Request(1); inst != 1 {
		t.Errorf("moved to %d", inst)
	}
	if err := l.FirstToken(1, 2*sec); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, l.Move(1, 0, 0), ErrState, StatusState, "lr_load_move")
	if _, queued, _ := l.Request(1); queued {
		t.Error("still queued after the first token")
	}
	if s, _ := l.Get(1); s.DecodeTokens != 100 || s.Queued != 0 || s.LastFirstTokenAt != 2*sec {
		t.Errorf("decoding snapshot %+v", s)
	}
	if err := l.SetStats(1, EngineStats{Running: 1, KVUse: 0.25, ScrapedAt: 3 * sec}); err != nil {
		t.Fatal(err)
	}
	if err := l.ObserveRTT(1, 4*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if s, _ := l.Get(1); !s.HasStats || s.Running != 1 || !s.HasRTT || s.RTT != 4*time.Millisecond {
		t.Errorf("telemetry %+v", s)
	}
	wantStatus(t, l.ObserveRTT(1, 2*time.Minute), ErrRange, StatusRange, "lr_load_observe_rtt")
	if err := l.Complete(1, 90, 4*sec); err != nil {
		t.Fatal(err)
	}
	if err := l.Fail(2); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, l.Fail(2), ErrNotFound, StatusNotFound, "lr_load_fail")
	wantStatus(t, l.FirstToken(1, 5*sec), ErrNotFound, StatusNotFound, "lr_load_first_token")
	wantStatus(t, l.Complete(7, 0, 0), ErrNotFound, StatusNotFound, "lr_load_complete")
	_, _, err = l.Request(1)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_load_request")
	for i := InstanceID(0); i < 3; i++ {
		if s, _ := l.Get(i); !zeroLoad(s) {
			t.Errorf("instance %d not back to zero: %+v", i, s)
		}
	}
	if l.Inflight() != 0 {
		t.Errorf("Inflight() = %d", l.Inflight())
	}
	if err := l.RemoveInstance(2); err != nil {
		t.Fatal(err)
	}
	_, err = l.Get(2)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_load_get")
	l.Close()
	if err := l.Fail(1); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
}
