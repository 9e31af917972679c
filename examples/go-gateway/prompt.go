package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"libroute"
)

// tokenWidth is the pseudo-token width in bytes, as the Python gateway's
// (lr_text_tokens; 4 is close to a real tokenizer's average on English).
const tokenWidth = 4

// completion is what the gateway reads of an OpenAI-style request body.
type completion struct {
	// Each message as "<|role|>content" (one part for a completion's
	// prompt), as examples/gateway/fake_engine.py's prompt_text cuts it:
	// kept as its two pieces, joined only in cut's scratch buffer.
	parts []part
	// A prompt given as token ids (llama.cpp and vLLM take them): the
	// router's tokens as they are. nil for text.
	ids       []uint32
	chat      bool // messages, not a prompt
	maxTokens uint32
	stream    bool
	// The request's "model" ("" when none): a base model or a LoRA
	// adapter (lora.go).
	model string
}

// part is one message as the engine sees it: head + body, "<|role|>"
// and the content ("" and the prompt for a completion).
type part struct{ head, body string }

func message(role, content string) part { return part{"<|" + role + "|>", content} }

// parseCompletion reads a /v1/completions or /v1/chat/completions body.
// Errors are the client's (HTTP 400).
func parseCompletion(raw []byte) (completion, error) {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	// The common shape (string contents, numbers and booleans where they
	// belong) decodes in one pass into a struct; anything else, such as
	// a list of content parts, takes the generic path.
	var body struct {
		Messages *[]struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"messages"`
		Prompt    *string  `json:"prompt"`
		MaxTokens *float64 `json:"max_tokens"`
		NPredict  *float64 `json:"n_predict"`
		Stream    *bool    `json:"stream"`
		Model     *string  `json:"model"`
	}
	err := json.Unmarshal(raw, &body)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return parseGeneric(raw)
	}
	if err != nil {
		return completion{}, fmt.Errorf("the body must be a JSON object: %v", err)
	}
	c := completion{maxTokens: 16}
	if body.Messages != nil {
		c.chat = true
		c.parts = make([]part, len(*body.Messages))
		for i, m := range *body.Messages {
			role, content := "user", ""
			if m.Role != nil {
				role = *m.Role
			}
			if m.Content != nil {
				content = *m.Content
			}
			c.parts[i] = message(role, content)
		}
	} else {
		prompt := ""
		if body.Prompt != nil {
			prompt = *body.Prompt
		}
		c.parts = []part{{body: prompt}}
	}
	if n := body.MaxTokens; n != nil {
		if *n < 0 || *n > 1<<31 {
			return c, errors.New("max_tokens: expected a non-negative integer")
		}
		c.maxTokens = uint32(*n)
	} else if n := body.NPredict; n != nil && *n >= 0 && *n <= 1<<31 {
		c.maxTokens = uint32(*n) // llama.cpp's; -1 (no limit) keeps 16
	}
	c.stream = body.Stream != nil && *body.Stream
	if body.Model != nil {
		c.model = *body.Model
	}
	return c, nil
}

// tokenIDs reads a prompt given as token ids: a JSON array of integers
// in 0..2^32-1.
func tokenIDs(raw json.RawMessage) ([]uint32, error) {
	var nums []json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&nums); err != nil {
		return nil, errors.New("prompt: expected a string or token ids")
	}
	ids := make([]uint32, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseUint(string(n), 10, 32)
		if err != nil {
			return nil, errors.New("prompt: token ids must be integers in 0..2^32-1")
		}
		ids[i] = uint32(v)
	}
	return ids, nil
}

// parseEnvelope reads what a gateway that does not route by the prompt
// needs: a JSON object, max_tokens and stream (the prompt is skipped, not
// decoded).
func parseEnvelope(raw []byte) (completion, error) {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	var body struct {
		MaxTokens *float64 `json:"max_tokens"`
		Stream    *bool    `json:"stream"`
	}
	c := completion{maxTokens: 16}
	if err := json.Unmarshal(raw, &body); err != nil {
		return c, fmt.Errorf("the body must be a JSON object with a numeric max_tokens: %v", err)
	}
	if n := body.MaxTokens; n != nil {
		if *n < 0 || *n > 1<<31 {
			return c, errors.New("max_tokens: expected a non-negative integer")
		}
		c.maxTokens = uint32(*n)
	}
	c.stream = body.Stream != nil && *body.Stream
	return c, nil
}

// parseGeneric reads a body of any shape, as the Python gateway does: a
// non-string content or role is written as its value.
func parseGeneric(raw []byte) (completion, error) {
	var c completion
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return c, fmt.Errorf("the body must be a JSON object: %v", err)
	}
	if m, ok := body["messages"]; ok && string(m) != "null" {
		c.chat = true
		var msgs []map[string]any
		if err := json.Unmarshal(m, &msgs); err != nil {
			return c, errors.New("messages: each must be an object")
		}
		for _, msg := range msgs {
			role, content := "user", ""
			if v, ok := msg["role"]; ok && v != nil {
				role = fmt.Sprint(v)
			}
			if v, ok := msg["content"]; ok && v != nil {
				content = fmt.Sprint(v)
			}
			c.parts = append(c.parts, message(role, content))
		}
	} else {
		prompt := ""
		if p, ok := body["prompt"]; ok && string(p) != "null" {
			if len(p) > 0 && p[0] == '[' {
				ids, err := tokenIDs(p)
				if err != nil {
					return c, err
				}
				c.ids = ids
			} else if err := json.Unmarshal(p, &prompt); err != nil {
				return c, errors.New("prompt: expected a string or token ids")
			}
		}
		c.parts = []part{{body: prompt}}
	}
	c.maxTokens = 16
	if m, ok := body["max_tokens"]; ok && string(m) != "null" {
		var n float64
		if err := json.Unmarshal(m, &n); err != nil || n < 0 || n > 1<<31 {
			return c, errors.New("max_tokens: expected a non-negative integer")
		}
		c.maxTokens = uint32(n)
	} else if m, ok := body["n_predict"]; ok {
		var n float64 // llama.cpp's; -1 (no limit) keeps 16
		if json.Unmarshal(m, &n) == nil && n >= 0 && n <= 1<<31 {
			c.maxTokens = uint32(n)
		}
	}
	if s, ok := body["stream"]; ok {
		_ = json.Unmarshal(s, &c.stream) // anything but true: no stream
	}
	if m, ok := body["model"]; ok && string(m) != "null" {
		if err := json.Unmarshal(m, &c.model); err != nil {
			return c, errors.New("model: expected a string")
		}
	}
	return c, nil
}

// cut holds a request's tokens and message ends, and the scratch buffer
// each message is joined in. The router only borrows tokens for the call
// (B7), so one cut serves a request's routes and then the next request.
type cut struct {
	toks, ends []uint32
	scratch    []byte
}

var cuts = sync.Pool{New: func() any { return new(cut) }}

// maxPooled bounds what a pooled cut keeps between requests.
const maxPooled = 1 << 20

func getCut() *cut { return cuts.Get().(*cut) }

func putCut(c *cut) {
	if cap(c.toks) <= maxPooled && cap(c.scratch) <= 4*maxPooled {
		cuts.Put(c)
	}
}

// tokens cuts the prompt into k: the tokens of the messages joined as the
// engine reads them, cut once, and each message's end (the boundaries the
// router learns at) rounded down to a whole token, the last one the whole
// prompt. A conversation's history is a byte prefix of its next turn, so
// its whole tokens are a token prefix of the next turn's. One call into
// the library; no allocation once k has grown to the prompt.
func (c *completion) tokens(k *cut) (toks, ends []uint32, err error) {
	if c.ids != nil { // token ids: the router's tokens as they are
		return c.ids, append(k.ends[:0], uint32(len(c.ids))), nil
	}
	k.scratch, ends = k.scratch[:0], k.ends[:0]
	for _, p := range c.parts {
		k.scratch = append(append(k.scratch, p.head...), p.body...)
		ends = append(ends, uint32(len(k.scratch)/tokenWidth))
	}
	if toks, err = libroute.TextTokensAppend(k.toks[:0], k.scratch, tokenWidth); err != nil {
		return nil, nil, err
	}
	if len(ends) > 0 {
		ends[len(ends)-1] = uint32(len(toks))
	}
	k.toks, k.ends = toks, ends
	return toks, ends, nil
}
