package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// engineTokens tokenizes a text prompt with a live backend's /tokenize
// (llama.cpp's, with BOS as the engine reads a prompt), so the router
// sees the model's own tokens. Chat messages are rendered by the
// backend's /apply-template first, and each message's end is found in
// the rendered text and turned into a token offset through the tokens'
// pieces. Backends are tried in turn until one answers.
func (g *Gateway) engineTokens(raw []byte, c *completion) (toks, ends []uint32, err error) {
	var ups []*Backend
	for _, b := range g.backends {
		if b.up.Load() {
			ups = append(ups, b)
		}
	}
	if len(ups) == 0 {
		return nil, nil, errors.New("no backend is up")
	}
	start := g.tokTurn.Add(1)
	err = errors.New("no backend answered")
	for k := range ups {
		b := ups[(start+uint64(k))%uint64(len(ups))]
		if toks, ends, e := g.tokensFrom(b, raw, c); e == nil {
			return toks, ends, nil
		} else {
			err = fmt.Errorf("%s: %w", b.Name, e)
		}
	}
	return nil, nil, err
}

func (g *Gateway) postJSON(b *Backend, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	code, data, err := g.fetch(b, http.MethodPost, path, body, g.cfg.Timeout)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", path, code)
	}
	return json.Unmarshal(data, out)
}

// piece is one token of llama.cpp's /tokenize with_pieces: its id, and
// its text (a string, or its bytes when they are not valid UTF-8).
type piece struct {
	ID    uint32          `json:"id"`
	Piece json.RawMessage `json:"piece"`
}

func (p piece) bytes() []byte {
	var s string
	if json.Unmarshal(p.Piece, &s) == nil {
		return []byte(s)
	}
	var bs []byte
	var ints []int
	if json.Unmarshal(p.Piece, &ints) == nil {
		for _, v := range ints {
			bs = append(bs, byte(v))
		}
	}
	return bs
}

func (g *Gateway) tokensFrom(b *Backend, raw []byte, c *completion) (toks, ends []uint32, err error) {
	text := ""
	var contents []string
	if c.chat {
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, nil, err
		}
		for _, m := range body.Messages {
			s, _ := m["content"].(string)
			contents = append(contents, s)
		}
		var tpl struct {
			Prompt *string `json:"prompt"`
		}
		if err := g.postJSON(b, "/apply-template", map[string]any{"messages": body.Messages}, &tpl); err != nil {
			return nil, nil, err
		}
		if tpl.Prompt == nil {
			return nil, nil, errors.New("/apply-template: no prompt")
		}
		text = *tpl.Prompt
	} else if len(c.parts) == 1 {
		text = c.parts[0].body
	}
	req := map[string]any{"content": text, "add_special": true, "with_pieces": c.chat}
	if !c.chat {
		var out struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := g.postJSON(b, "/tokenize", req, &out); err != nil {
			return nil, nil, err
		}
		return out.Tokens, []uint32{uint32(len(out.Tokens))}, nil
	}
	var out struct {
		Tokens []piece `json:"tokens"`
	}
	if err := g.postJSON(b, "/tokenize", req, &out); err != nil {
		return nil, nil, err
	}
	toks = make([]uint32, len(out.Tokens))
	pieces := make([][]byte, len(out.Tokens))
	for i, p := range out.Tokens {
		toks[i], pieces[i] = p.ID, p.bytes()
	}
	return toks, pieceEnds(text, pieces, contents), nil
}

// pieceEnds gives each message's end as a token offset: the end of its
// content in the rendered text, found in order, and the tokens whose
// pieces end at or before it. A special token whose piece is not in the
// text (BOS) counts as a token and no bytes; so does a word's added
// leading space. The last end is the whole prompt. (The Python gateway's
// piece_ends does the same.)
func pieceEnds(text string, pieces [][]byte, contents []string) []uint32 {
	endsB := make([]int, 0, len(contents))
	pos := 0
	for _, c := range contents {
		if c != "" {
			if i := strings.Index(text[pos:], c); i >= 0 {
				pos += i + len(c)
			}
		}
		endsB = append(endsB, pos)
	}
	offs := make([]int, len(pieces))
	at := 0
	for i, p := range pieces {
		if len(p) > 0 && strings.HasPrefix(text[at:], string(p)) {
			at += len(p)
		} else if q := strings.TrimLeft(string(p), " "); q != "" && strings.HasPrefix(text[at:], q) {
			at += len(q)
		}
		offs[i] = at
	}
	out := make([]uint32, 0, len(endsB))
	k := 0
	for _, e := range endsB {
		for k < len(offs) && offs[k] <= e {
			k++
		}
		out = append(out, uint32(k))
	}
	if len(out) > 0 {
		out[len(out)-1] = uint32(len(pieces))
	}
	return out
}
