package libroute

import "testing"

func TestTextTokens(t *testing.T) {
	a, err := TextTokens([]byte("You are a helpful assistant. Hello"), 4)
	if err != nil || len(a) != 9 {
		t.Fatalf("%d tokens, %v", len(a), err)
	}
	b, _ := TextTokens([]byte("You are a helpful assistant. Goodbye"), 4)
	for i := 0; i < 7; i++ {
		if a[i] != b[i] {
			t.Fatalf("equal prefixes differ at token %d", i)
		}
	}
	if a[8] == b[8] {
		t.Error("different tails gave equal tokens")
	}
	if n, err := TextTokens(nil, 4); err != nil || len(n) != 0 {
		t.Errorf("empty text: %v %v", n, err)
	}
	_, err = TextTokens([]byte("x"), 0)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_text_tokens")
	_, err = TextTokens([]byte("x"), TextMaxWidth+1)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_text_tokens")
}
