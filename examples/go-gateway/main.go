// Command go-gateway is an OpenAI-style reverse proxy in front of LLM
// engines that routes every request with libroute through its Go binding:
// the Go counterpart of examples/gateway/gateway.py, with the same
// decision headers and the same /metrics.
//
//	go-gateway -listen 127.0.0.1:8200 -policy prefix-cache \
//	    -backend e1=127.0.0.1:8101 -backend e2=127.0.0.1:8102
//
// POST /v1/completions and /v1/chat/completions are routed (streamed or
// not); while the fleet is saturated they wait in the router's queue,
// most urgent first (queue.go; -no-queue sends every one at once). A
// request's "model" that names a base model of the fleet (-models, or
// ",models=A+B" after a backend's address) goes to the backends that
// serve it; any other name is a LoRA adapter (lora.go), whose residency
// the engines' vllm:lora_requests_info reports and whose base model their
// GET /v1/models lists (or -adapter NAME=BASE names). GET
// /status shows the backends and the router's counters, GET /metrics the
// Prometheus metric set of docs/gateway.md. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
)

// backendFlags are the -backend values, read once every flag is known
// (-models and -max-loras are their defaults).
type backendFlags []string

func (b *backendFlags) String() string { return fmt.Sprint(*b) }

func (b *backendFlags) Set(v string) error {
	if _, err := parseBackend(v, nil, 0); err != nil {
		return err
	}
	*b = append(*b, v)
	return nil
}

func main() {
	var cfg Config
	var backends backendFlags
	listen := flag.String("listen", "127.0.0.1:8200", "address to serve on")
	flag.StringVar(&cfg.Policy, "policy", "prefix-cache", "a libroute policy name")
	flag.Var(&backends, "backend",
		"an engine as NAME=HOST:PORT[,models=A+B][,max_loras=N]: the model names it serves and its LoRA adapter slots override -models and -max-loras (repeat)")
	models := flag.String("models", "",
		"A,B: the model names every backend serves (vLLM's served model names); a request's model that is none of the fleet's is a LoRA adapter (default: none, every request routes whatever its model)")
	maxLoRAs := flag.Uint("max-loras", 0,
		"every backend's LoRA adapter slots (vLLM's --max-loras; 0: not declared, a scrape of vllm:lora_requests_info tells)")
	flag.BoolVar(&cfg.NoLibroute, "no-libroute", false,
		"route with the gateway's own round-robin, never calling libroute (the load test's baseline)")
	flag.Uint64Var(&cfg.IndexCapacityBlocks, "index-capacity-blocks", 0,
		"prefix index capacity in blocks (0: the library's default)")
	learnEvery := flag.Uint("learn-every", 0, "lodestar: train after N samples and every N more (0: the library's schedule)")
	flag.DurationVar(&cfg.ScrapeEvery, "scrape", 100*time.Millisecond, "engine metrics scrape period")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Second,
		"longest wait for an engine's response headers (llama.cpp sends a stream's with its first token)")
	flag.DurationVar(&cfg.DeadAfter, "dead-after", 5*time.Second,
		"drain a backend whose /health has not answered for this long (a refused connection drains at once)")
	flag.BoolVar(&cfg.EngineTokenizer, "tokenize", false,
		"tokenize text prompts with a backend's /tokenize (llama.cpp's), so the router sees the model's tokens")
	gogc := flag.Int("gogc", 400, "the collector's GOGC percent, unless the GOGC environment variable is set")
	flag.BoolVar(&cfg.NoQueue, "no-queue", false,
		"route every request at once, even to a saturated fleet (no waiting, no shedding; the priority, tenant and SLO headers are ignored)")
	satQueue := flag.Uint("saturation-queue", 0,
		"an instance is saturated with N requests before their first token, or N waiting in its scrape (0: the library's default, 8)")
	flag.Float64Var(&cfg.SaturationKV, "saturation-kv", 0,
		"... or its scrape's KV-cache use at this share (0.01..1; 0: the library's default, 0.8)")
	queueCap := flag.Uint("queue-capacity", 0, "requests waiting at once; more get 429 (0: the library's default, 4096)")
	var slo, objectives, adapters stringsFlag
	flag.Var(&adapters, "adapter",
		"NAME=BASE: LoRA adapter NAME is of base model BASE (one of the fleet's): its requests go only to the backends serving BASE; over what the engines' GET /v1/models lists (repeat)")
	flag.Var(&slo, "ttft-slo",
		"[URGENCY=]MS: the deadline of that urgency's requests (0..7; without it: every urgency) that carry no x-slo-ttft-ms header; past it a waiting request gets 429 (default: -timeout; repeat)")
	flag.Var(&objectives, "objective",
		"NAME=PRIORITY: the priority of requests whose x-gateway-inference-objective is NAME (as an InferenceObjective's; unknown names: 0; repeat)")
	flag.DurationVar(&cfg.DispatchEvery, "dispatch-every", 100*time.Millisecond, "dispatch timer while requests wait")
	flag.Parse()
	// A proxy's live heap is small (1 MB here) and its garbage
	// short-lived: at the runtime's default of 100 the collector ran 100
	// times a second at 7K requests/s in the load test (docs/perf.md), 20
	// times at 400.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*gogc)
	}
	if flag.NArg() > 0 || len(backends) == 0 {
		fmt.Fprintln(os.Stderr, "usage: go-gateway -backend NAME=HOST:PORT [-backend ...] [flags]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	for _, v := range backends {
		s, err := parseBackend(v, splitNames(*models, ","), uint32(*maxLoRAs))
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-gateway: -backend", err)
			os.Exit(2)
		}
		cfg.Backends = append(cfg.Backends, s)
	}
	cfg.LearnEvery = uint32(*learnEvery)
	cfg.SaturationQueue, cfg.QueueCapacity = uint32(*satQueue), uint32(*queueCap)
	var err error
	if cfg.TTFTSLO, err = parseSLO(slo); err == nil {
		cfg.Objectives, err = parseObjectives(objectives)
	}
	if err == nil {
		cfg.Adapters, err = parseAdapters(adapters)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-gateway:", err)
		os.Exit(2)
	}

	g, err := NewGateway(cfg)
	if err != nil {
		log.Fatalf("go-gateway: %v", err)
	}
	srv := &http.Server{Addr: *listen, Handler: g, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("go-gateway: %v", err)
	}
	mode := "libroute " + cfg.Policy
	if cfg.NoLibroute {
		mode = "round-robin without libroute"
	} else if !cfg.NoQueue {
		mode += ", waiting queue"
	}
	fmt.Printf("go-gateway on http://%s (%s), %d backends\n", ln.Addr(), mode, len(backends))

	done := make(chan struct{})
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		close(done)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatalf("go-gateway: %v", err)
	}
	<-done
	g.Close()
}
