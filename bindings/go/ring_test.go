package libroute

import (
	"fmt"
	"sync"
	"testing"
)

func TestRing(t *testing.T) {
	r, err := NewRing(&RingOptions{Vnodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Candidates(1, 2)
	wantStatus(t, err, ErrState, StatusState, "lr_ring_candidates")
	for i := 0; i < 8; i++ {
		if err := r.Add(fmt.Sprintf("10.0.0.%d:8000", i), InstanceID(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	wantStatus(t, r.Add("10.0.0.1:8000", 1), ErrExist, StatusExist, "lr_ring_add")
	wantStatus(t, r.Add("x", 100), ErrExist, StatusExist, "lr_ring_add")
	wantStatus(t, r.Add("a\x00b", 1), ErrInvalid, StatusInvalid, "lr_ring_add")
	wantStatus(t, r.Remove(1), ErrNotFound, StatusNotFound, "lr_ring_remove")
	if r.Count() != 8 || !r.Contains(103) || r.Contains(3) {
		t.Fatalf("count %d", r.Count())
	}
	for key := uint64(0); key < 100; key++ {
		c, err := r.Candidates(key*0x9e3779b97f4a7c15, RingMaxK)
		if err != nil || len(c) != 8 {
			t.Fatalf("candidates %v, %v", c, err)
		}
		seen := map[InstanceID]bool{}
		for _, id := range c {
			if seen[id] || id < 100 || id >= 108 {
				t.Fatalf("candidates %v", c)
			}
			seen[id] = true
		}
	}
	_, err = r.Candidates(1, 0)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_ring_candidates")
	_, err = r.Candidates(1, RingMaxK+1)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_ring_candidates")

	// Placement depends on names only, not on the order of adds.
	r2, _ := NewRing(&RingOptions{Vnodes: 64})
	defer r2.Close()
	for i := 7; i >= 0; i-- {
		if err := r2.Add(fmt.Sprintf("10.0.0.%d:8000", i), InstanceID(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	for key := uint64(0); key < 100; key++ {
		a, _ := r.Candidates(key, 2)
		b, _ := r2.Candidates(key, 2)
		if a[0] != b[0] || a[1] != b[1] {
			t.Fatalf("key %d: %v vs %v", key, a, b)
		}
	}
	// Queries may run concurrently with each other.
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for key := uint64(0); key < 1000; key++ {
				if _, err := r.Candidates(key+uint64(g)<<40, 2); err != nil {
					t.Error(err)
					return
				}
				_ = r.Count()
				_ = r.Contains(100)
			}
		}(g)
	}
	wg.Wait()
	if err := r.Remove(103); err != nil || r.Count() != 7 || r.Contains(103) {
		t.Fatalf("remove: %v", err)
	}
	r.Close()
	if err := r.Add("y", 1); err != ErrClosed {
		t.Errorf("Add after Close: %v", err)
	}
	if r.Count() != 0 || r.Contains(100) {
		t.Error("queries after Close")
	}
}
