package main

// Models and LoRA adapters (the Python gateway's model_of, lora_info and
// parse_backend, examples/gateway/gateway.py): a backend may be declared
// with the model names it serves (vLLM's --served-model-name) and its
// adapter slots (vLLM's --max-loras). A request's "model" that names one of
// the fleet's base models goes only to the backends that serve it; any
// other name is a LoRA adapter, as vLLM serves adapters under their own
// names, routed to a model every backend with adapter slots serves (any
// backend when they share none). A name that is neither, where no backend
// has adapter slots (declared, or seen in a scrape), gets 404 as vLLM
// answers an unknown model. A fleet that declares no models routes every
// request whatever its model.
//
// An adapter's base model, when known, is its model instead: each scrape
// reads the backend's GET /v1/models, where vLLM lists every adapter it
// serves with its base model as "parent" (parseModelList), and -adapter
// NAME=BASE names it for engines that list none. An adapter routed with
// its base model goes only to the backends that serve that base, in a
// fleet of several base models with adapters too.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"libroute"
)

// errUnknownModel: a request's model is none the fleet serves (404).
var errUnknownModel = errors.New("unknown model")

// parseBackend reads -backend NAME=HOST:PORT[,models=A+B][,max_loras=N];
// models and maxLoRAs are the defaults (-models, -max-loras) its options
// override.
func parseBackend(v string, models []string, maxLoRAs uint32) (BackendSpec, error) {
	fields := strings.Split(v, ",")
	name, addr, ok := strings.Cut(fields[0], "=")
	if !ok || name == "" {
		return BackendSpec{}, fmt.Errorf("%q: expected NAME=HOST:PORT[,models=A+B][,max_loras=N]", v)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return BackendSpec{}, fmt.Errorf("%q: %v", v, err)
	}
	s := BackendSpec{Name: name, Addr: addr, Models: models, MaxLoRAs: maxLoRAs}
	for _, o := range fields[1:] {
		key, value, ok := strings.Cut(o, "=")
		switch {
		case ok && key == "models":
			s.Models = splitNames(value, "+")
		case ok && key == "max_loras":
			n, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				return BackendSpec{}, fmt.Errorf("%q: max_loras=%q: not a number", v, value)
			}
			s.MaxLoRAs = uint32(n)
		default:
			return BackendSpec{}, fmt.Errorf("%q: %q: expected models=A+B or max_loras=N", v, o)
		}
	}
	return s, nil
}

// splitNames splits a list of names at sep, leaving out empty ones.
func splitNames(s, sep string) []string {
	var out []string
	for _, n := range strings.Split(s, sep) {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// parseAdapters reads -adapter NAME=BASE values as {adapter: base model}.
func parseAdapters(specs []string) (map[string]string, error) {
	out := make(map[string]string, len(specs))
	for _, v := range specs {
		name, base, ok := strings.Cut(v, "=")
		if !ok || name == "" || base == "" {
			return nil, fmt.Errorf("%q: expected NAME=BASE", v)
		}
		out[name] = base
	}
	return out, nil
}

// checkAdapters checks Config.Adapters against the fleet's base models
// (each BASE one, no NAME one) and starts adapterBases with them.
func (g *Gateway) checkAdapters() error {
	bases := make(map[string]string, len(g.cfg.Adapters))
	for name, base := range g.cfg.Adapters {
		if !g.baseModels[base] {
			return fmt.Errorf("adapter %s: %q is none of the fleet's base models", name, base)
		}
		if g.baseModels[name] {
			return fmt.Errorf("adapter %s: a base model", name)
		}
		bases[name] = base
	}
	g.adapterBases.Store(&bases)
	return nil
}

// parseModelList reads the adapters of an engine's GET /v1/models, each
// with its base model: vLLM lists its base models ("parent" null) and
// every LoRA adapter it serves (--lora-modules, loaded at runtime or
// resolved) as {"id": ADAPTER, "parent": BASE, ...}. An entry counts only
// when its parent is among models (the backend's served names, or the
// fleet's) and its id is not; ok false when the answer is no model list.
func parseModelList(data []byte, models map[string]bool) (parents map[string]string, ok bool) {
	var doc struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(data, &doc) != nil || doc.Data == nil {
		return nil, false
	}
	parents = map[string]string{}
	for _, raw := range doc.Data {
		var row struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		}
		if json.Unmarshal(raw, &row) != nil || row.ID == "" || row.Parent == nil {
			continue
		}
		if models[*row.Parent] && !models[row.ID] {
			parents[row.ID] = *row.Parent
		}
	}
	return parents, true
}

// scrapeModels reads the adapters b's GET /v1/models lists, with their
// base models (a parent counts when b serves it, or, for a backend that
// declares no models, when the fleet does): an adapter loaded at runtime
// is known from the next scrape, one unloaded forgotten. A fleet that
// declares no models routes by none and does not ask; a late or failed
// answer is skipped.
func (g *Gateway) scrapeModels(b *Backend) {
	if len(g.baseModels) == 0 {
		return
	}
	code, data, err := g.fetch(b, http.MethodGet, "/v1/models", nil, 2*g.cfg.ProbeTimeout)
	if err != nil || code != http.StatusOK {
		return
	}
	models := g.baseModels
	if len(b.Models) > 0 {
		models = make(map[string]bool, len(b.Models))
		for _, m := range b.Models {
			models[m] = true
		}
	}
	parents, ok := parseModelList(data, models)
	g.parentsMu.Lock()
	defer g.parentsMu.Unlock()
	if !ok || sameNames(parents, b.parents) {
		return
	}
	b.parents = parents
	// adapterBases anew: the flags', then each listed adapter whose
	// backends agree on its base model; one listed with two bases stays
	// unknown (modelOf's rule for an adapter of no known base).
	listed := map[string]string{}
	for _, o := range g.backends {
		for name, base := range o.parents {
			if prev, seen := listed[name]; seen && prev != base {
				base = ""
			}
			listed[name] = base
		}
	}
	bases := make(map[string]string, len(listed)+len(g.cfg.Adapters))
	for name, base := range listed {
		if base != "" {
			bases[name] = base
		}
	}
	for name, base := range g.cfg.Adapters {
		bases[name] = base
	}
	g.adapterBases.Store(&bases)
}

// sameNames says whether a and b hold the same pairs (nil as empty).
func sameNames(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// modelOf is the router's model and adapter for a request's model name
// (see the file's comment): an adapter of a known base model (adapterBases)
// has that model; errUnknownModel when the name is neither a base model
// nor, in a fleet with adapter slots, an adapter.
func (g *Gateway) modelOf(name string) (model, adapter string, err error) {
	if len(g.baseModels) == 0 || name == "" {
		return "", "", nil
	}
	if g.baseModels[name] {
		return name, "", nil
	}
	if base, ok := (*g.adapterBases.Load())[name]; ok {
		return base, name, nil
	}
	var common map[string]bool // the models every LoRA backend serves
	lora := false
	for _, b := range g.backends {
		if b.maxLoRAs.Load() == 0 && !b.adapterSeen.Load() {
			continue
		}
		serves := map[string]bool{}
		for _, m := range b.Models {
			if common == nil || common[m] {
				serves[m] = true
			}
		}
		common, lora = serves, true
	}
	if !lora {
		return "", "", errUnknownModel
	}
	if len(common) > 0 {
		names := make([]string, 0, len(common))
		for m := range common {
			names = append(names, m)
		}
		sort.Strings(names)
		model = names[0]
	}
	return model, name, nil
}

// loraInfo is vLLM's vllm:lora_requests_info gauge: the adapters with
// requests running and waiting on the engine, and its slots.
type loraInfo struct {
	running, waiting []string
	maxLoRA          uint32
}

var (
	loraInfoLine = regexp.MustCompile(`^vllm:lora_requests_info\{([^}]*)\}\s+([0-9.eE+-]+)\s*$`)
	labelPair    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseLoRAInfo reads the latest vllm:lora_requests_info sample of a
// /metrics page (vLLM keeps every label set it has set, each valued with
// the time it was set); ok false when there is none.
func parseLoRAInfo(text []byte) (info loraInfo, ok bool) {
	if !bytes.Contains(text, []byte("vllm:lora_requests_info")) {
		return loraInfo{}, false
	}
	best := 0.0
	var labels []byte
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := loraInfoLine.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		t, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil || (ok && t < best) {
			continue
		}
		best, labels, ok = t, append(labels[:0], m[1]...), true
	}
	if !ok {
		return loraInfo{}, false
	}
	for _, p := range labelPair.FindAllSubmatch(labels, -1) {
		v := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(string(p[2]))
		switch string(p[1]) {
		case "running_lora_adapters":
			info.running = splitNames(v, ",")
		case "waiting_lora_adapters":
			info.waiting = splitNames(v, ",")
		case "max_lora":
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				info.maxLoRA = clampU32(n)
			}
		}
	}
	return info, true
}

// scrapeAdapters feeds a vLLM engine's lora_requests_info to the router
// (SetAdapters). A report the router refuses (a name too long, more
// adapters than it follows) is skipped.
func (g *Gateway) scrapeAdapters(b *Backend, text []byte) {
	info, ok := parseLoRAInfo(text)
	if !ok {
		return
	}
	b.adapterSeen.Store(true)
	if info.maxLoRA > 0 {
		b.maxLoRAs.Store(info.maxLoRA)
	}
	_ = g.router.SetAdapters(b.ID, libroute.AdapterStats{
		Running: info.running, Waiting: info.waiting,
		MaxAdapters: min32(info.maxLoRA, libroute.RouterMaxAdapters), Scraped: now(),
	})
}

func min32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}
