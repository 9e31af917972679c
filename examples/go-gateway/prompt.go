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
	parts     [][]byte
	maxTokens uint32
	stream    bool
}

// part is one message as the engine sees it: "<|role|>content".
func part(role, content string) []byte {
	b := make([]byte, 0, len(role)+len(content)+4)
	b = append(b, "<|"...)
	b = append(b, role...)
	b = append(b, "|>"...)
	return append(b, content...)
}

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
		Stream    *bool    `json:"stream"`
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
		c.parts = make([][]byte, len(*body.Messages))
		for i, m := range *body.Messages {
			role, content := "user", ""
			if m.Role != nil {
				role = *m.Role
			}
			if m.Content != nil {
				content = *m.Content
			}
			c.parts[i] = part(role, content)
		}
	} else {
		prompt := ""
		if body.Prompt != nil {
			prompt = *body.Prompt
		}
		c.parts = [][]byte{[]byte(prompt)}
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
			c.parts = append(c.parts, part(role, content))
		}
	} else {
		prompt := ""
		if p, ok := body["prompt"]; ok && string(p) != "null" {
			if err := json.Unmarshal(p, &prompt); err != nil {
				return c, errors.New("prompt: expected a string")
			}
		}
		c.parts = [][]byte{[]byte(prompt)}
	}
	c.maxTokens = 16
	if m, ok := body["max_tokens"]; ok && string(m) != "null" {
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
// end (the message boundaries the router learns at). One buffer, one call
// into the library per part.
func (c *completion) tokens() (toks, ends []uint32, err error) {
	n := 0
	for _, p := range c.parts {
		n += (len(p) + tokenWidth - 1) / tokenWidth
	}
	toks = make([]uint32, 0, n)
	ends = make([]uint32, 0, len(c.parts))
	for _, p := range c.parts {
		if toks, err = libroute.TextTokensAppend(toks, p, tokenWidth); err != nil {
			return nil, nil, err
		}
		ends = append(ends, uint32(len(toks)))
	}
	return toks, ends, nil
}
