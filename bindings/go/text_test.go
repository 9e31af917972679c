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

// TextTokensAppend cuts as TextTokens does, after what dst holds, reusing
// its room.
func TestTextTokensAppend(t *testing.T) {
	text := []byte("You are a helpful assistant. Hello there")
	for width := uint32(1); width <= TextMaxWidth; width++ {
		for n := 0; n <= len(text); n++ {
			want, err := TextTokens(text[:n], width)
			if err != nil {
				t.Fatal(err)
			}
			got, err := TextTokensAppend([]uint32{7}, text[:n], width)
			if err != nil || len(got) != len(want)+1 || got[0] != 7 {
				t.Fatalf("width %d, %d bytes: %v %v", width, n, got, err)
			}
			for i := range want {
				if got[i+1] != want[i] {
					t.Fatalf("width %d, %d bytes: token %d", width, n, i)
				}
			}
		}
	}
	buf := make([]uint32, 0, 64)
	out, err := TextTokensAppend(buf, text, 4)
	if err != nil || &out[0] != &buf[:1][0] {
		t.Errorf("did not reuse the room: %v", err)
	}
	dst := []uint32{1, 2}
	for _, width := range []uint32{0, TextMaxWidth + 1} {
		got, err := TextTokensAppend(dst, text, width)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_text_tokens")
		if len(got) != 2 {
			t.Errorf("width %d: dst changed to %v", width, got)
		}
	}
}
