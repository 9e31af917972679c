// Command instant-engine is a fake OpenAI-style engine that answers at
// once, for load-testing the gateway (tools/load-test): every listed port
// serves POST /v1/completions and /v1/chat/completions with a short fixed
// answer (streamed when asked), GET /metrics with vLLM's gauges and GET
// /health. Unlike examples/gateway/fake_engine.py it has no prefix cache
// and no delays, and costs a few microseconds per request, so what a load
// test measures is the gateway.
//
//	instant-engine -listen 127.0.0.1:9101 -listen 127.0.0.1:9102
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

type listens []string

func (l *listens) String() string     { return strings.Join(*l, ",") }
func (l *listens) Set(v string) error { *l = append(*l, v); return nil }

type engine struct {
	name    string
	running atomic.Int64
}

var (
	chatAnswer = `{"choices":[{"message":{"role":"assistant","content":" tok0 tok1"}}],` +
		`"backend":"%s","usage":{"prompt_tokens":%d,"completion_tokens":2,` +
		`"prompt_tokens_details":{"cached_tokens":0}}}`
	textAnswer = `{"choices":[{"text":" tok0 tok1"}],"backend":"%s","usage":{"prompt_tokens":%d,` +
		`"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`
)

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		fmt.Fprintf(w, `{"ok": true, "name": %q}`, e.name)
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "vllm:num_requests_running %d\nvllm:num_requests_waiting 0\n"+
			"vllm:kv_cache_usage_perc 0.1\n", e.running.Load())
	case "/v1/completions", "/v1/chat/completions":
		if r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		e.running.Add(1)
		defer e.running.Add(-1)
		req, _ := io.ReadAll(r.Body)
		n := len(req)
		format := textAnswer
		if strings.HasSuffix(r.URL.Path, "chat/completions") {
			format = chatAnswer
		}
		body := fmt.Sprintf(format, e.name, n/4)
		// Not parsed: a stream is a body that says "stream": true.
		if bytes.Contains(req, []byte(`"stream": true`)) || bytes.Contains(req, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\" tok0\"}}]}\n\n"+
				"data: %s\n\ndata: [DONE]\n\n", body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	default:
		http.NotFound(w, r)
	}
}

func main() {
	var ls listens
	flag.Var(&ls, "listen", "host:port to serve an engine on (repeat)")
	flag.Parse()
	if len(ls) == 0 {
		fmt.Fprintln(os.Stderr, "usage: instant-engine -listen HOST:PORT [-listen ...]")
		os.Exit(2)
	}
	errs := make(chan error)
	for i, addr := range ls {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		e := &engine{name: fmt.Sprintf("e%d", i+1)}
		go func() { errs <- http.Serve(ln, e) }()
	}
	log.Fatal(<-errs)
}
