package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"libroute"
)

// tokenWidth is the pseudo-token width in bytes, as the Python gateway's
// (lr_text_tokens; 4 is close to a real tokenizer's average on English).
const tokenWidth = 4

// completion is what the gateway reads of an OpenAI-style request body.
type completion struct {
	// Each message as "<|role|>content" (one part for a completion's
	// prompt), as examples/gateway/fake_engine.py's prompt_text cuts it.
	parts     []string
	maxTokens uint32
	stream    bool
}

// parseCompletion reads a /v1/completions or /v1/chat/completions body.
// Errors are the client's (HTTP 400).
func parseCompletion(raw []byte) (completion, error) {
	var c completion
	var body map[string]json.RawMessage
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return c, fmt.Errorf("the body must be a JSON object: %v", err)
	}
	if m, ok := body["messages"]; ok {
		var msgs []map[string]any
		if err := json.Unmarshal(m, &msgs); err != nil {
			return c, errors.New("messages: each must be an object")
		}
		for _, msg := range msgs {
			role, ok := msg["role"].(string)
			if !ok {
				role = "user"
			}
			content, ok := msg["content"].(string)
			if !ok && msg["content"] != nil {
				content = fmt.Sprint(msg["content"])
			}
			c.parts = append(c.parts, "<|"+role+"|>"+content)
		}
	} else {
		prompt := ""
		if p, ok := body["prompt"]; ok {
			if err := json.Unmarshal(p, &prompt); err != nil {
				return c, errors.New("prompt: expected a string")
			}
		}
		c.parts = []string{prompt}
	}
	c.maxTokens = 16
	if m, ok := body["max_tokens"]; ok {
		var n float64
		if err := json.Unmarshal(m, &n); err != nil || n < 0 || n > 1<<31 {
			return c, errors.New("max_tokens: expected a non-negative integer")
		}
		c.maxTokens = uint32(n)
	}
	if s, ok := body["stream"]; ok {
		_ = json.Unmarshal(s, &c.stream) // anything but true: no stream
	}
	return c, nil
}

// tokens cuts each part on its own, so that a conversation's turn starts
// with the previous turn's tokens, and returns the tokens and each part's
// end (the message boundaries the router learns at).
func (c *completion) tokens() (toks, ends []uint32, err error) {
	ends = make([]uint32, 0, len(c.parts))
	for _, p := range c.parts {
		t, err := libroute.TextTokens([]byte(p), tokenWidth)
		if err != nil {
			return nil, nil, err
		}
		toks = append(toks, t...)
		ends = append(ends, uint32(len(toks)))
	}
	return toks, ends, nil
}
