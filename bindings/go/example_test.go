package libroute_test

import (
	"errors"
	"fmt"
	"log"

	"libroute"
)

// A gateway's use of the router: add instances, route each request, report
// its lifecycle.
func Example() {
	opt := libroute.DefaultRouterOptions()
	opt.Policy = libroute.PolicyPrefixCache
	r, err := libroute.NewRouter(&opt)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	for _, name := range []string{"10.0.0.1:8000", "10.0.0.2:8000"} {
		if _, err := r.AddInstance(libroute.InstanceSpec{Name: name}); err != nil {
			log.Fatal(err)
		}
	}

	system := make([]uint32, 320) // a system prompt's tokens
	for i := range system {
		system[i] = uint32(i)
	}
	turn1 := append(system, 7, 8, 9)
	turn2 := append(append([]uint32(nil), turn1...), 10, 11, 12)

	now := uint64(1_000_000_000)
	for id, tokens := range [][]uint32{turn1, turn2} {
		d, err := r.Route(&libroute.Request{ID: uint64(id + 1), Tokens: tokens, Now: now})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d: %d cached, %v\n", id+1, d.CachedTokens, d.Reason)
		_ = r.FirstToken(uint64(id+1), now+50_000_000)
		_ = r.Complete(uint64(id+1), 100, now+900_000_000)
		now += 1_000_000_000
	}

	// An unknown request id: the error carries LR_ENOENT.
	err = r.Complete(42, 1, now)
	var e *libroute.Error
	if errors.As(err, &e) {
		fmt.Println(errors.Is(err, libroute.ErrNotFound), e.Op, e.Status)
	}
	// Output:
	// request 1: 0 cached, fallback
	// request 2: 320 cached, prefix-hit
	// true lr_router_complete LR_ENOENT
}
