"""A small OpenAI-compatible HTTP gateway that routes with libroute.

For each POST /v1/completions or /v1/chat/completions (and llama.cpp's
native /completion) it finds the prompt's tokens, asks the router,
proxies the request to the chosen backend, streams the answer back as it
comes, and reports the first token and the end (or the failure) to the
router. The tokens are, by the prompt:

- token ids (a prompt that is a list of ints): those;
- text, with --tokenize: the engine's own, from a backend's /tokenize
  (llama.cpp's; chat messages rendered by its /apply-template first), so
  the router sees the model's real tokens;
- text otherwise: libroute's text helper (one token per 4 bytes over the
  messages joined, so that a conversation's history is a token prefix of
  its next turn; message ends are the boundaries).

Behind it, one thread per backend, every 100 ms:

- GET /health, timed: the RTT; a backend that refuses the connection or
  answers anything but 200 (llama.cpp's 503 while it loads) is drained,
  and undrained once it answers 200 again; one that does not answer in
  time is drained only after --dead-after-s without any answer (an engine
  whose HTTP threads are all busy answers late, and is not dead);
- GET /metrics: running, waiting and KV use by vLLM's, llama.cpp's
  (`llamacpp:`) or SGLang's names into the router; an engine without
  metrics (llama.cpp without --metrics answers 501) is read from its
  /slots instead (running only), and a late answer (llama.cpp answers
  between two steps of its loop) is skipped, never a reason to drain;
- GET /v1/models, in a fleet that declares models: the LoRA adapters the
  engine lists and their base models (below).

Models and LoRA adapters: a backend may be declared with the model
names it serves (vLLM's --served-model-name: a base model and its
aliases; --models, or `,models=A+B` after its address) and its adapter
slots (vLLM's --max-loras; --max-loras, or `,max_loras=N`). A request's
`model` that names one of the fleet's base models goes only to the
backends that serve it; any other name is a LoRA adapter, as vLLM serves
adapters under their own names: it goes to a model every backend with
adapter slots serves (any backend when they share none), the router keys
its prefixes apart and follows where it is resident (the policies
lora-affinity and aibrix-lora send it there). A name that is neither, in a fleet with no adapter slots
declared or seen, gets 404, as vLLM answers an unknown model. The /metrics
scrape reads vLLM's `vllm:lora_requests_info` gauge too (the adapters
running and waiting there, and max_lora) into Router.set_adapters. A fleet
that declares no models routes every request whatever its `model`.

An adapter's base model, when known, is its model instead: each scrape
reads the backend's GET /v1/models, where vLLM lists every adapter it
serves with its base model as `parent` (adapter_parents), and
--adapter NAME=BASE names it for engines that list none. An adapter
routed with its base model goes only to the backends that serve that
base, in a fleet of several base models with adapters too.

A request whose backend refuses it is retried on the router's next
choice. An engine's error, as an HTTP status or inside a stream (a
`data: {"error": ...}` event), is a failure for the router, not a first
token. The cached prompt tokens each engine reports (llama.cpp's
`timings.cache_n`, vLLM's and SGLang's
`usage.prompt_tokens_details.cached_tokens`) are set against the router's
prediction (Gateway.on_observed).

While every backend is saturated, a request waits in the router's queue
(waiting.py) and is let out, most urgent first and by fair share between
tenants, as capacity frees; its priority, tenant and TTFT deadline come
from its headers (x-llm-priority or x-gateway-inference-objective,
x-gateway-inference-fairness-id or x-tenant-id, x-slo-ttft-ms; README,
"Waiting"). A sheddable request (negative priority) that would wait gets
429 at once, one whose deadline passes while it waits 429; --no-queue
sends every request at once.

Disaggregated prefill and decode: a backend may be declared a prefill or
a decode instance (--role, or `,role=prefill` after its address; `,node=`,
`,rack=`, `,region=` say where it runs). When the router's decision
names a prefill instance, the request goes in two legs, as vLLM's
disaggregated serving (its NixlConnector's toy proxy, llm-d's routing
sidecar) sends them: the prefill leg to the prefill instance
(prefill_body: `kv_transfer_params.do_remote_decode`, not streamed, one
token), then, once it answers (Router.prefill_done), the decode leg to
the decode instance (decode_body: the client's request with the
`kv_transfer_params` the prefill leg answered), whose answer the client
gets as any other; a request the router lets out of its queue goes the
same way when the dispatched entry names a prefill instance. A prefill
leg that fails fails the request (the client gets the error); one
refused is retried as any refusal.

GET /status shows the backends and the router's counters; GET /metrics
the Prometheus metric set of docs/gateway.md (metrics.py).

    python3 gateway.py --port 8100 --backend e1=127.0.0.1:8101 \\
        --backend e2=127.0.0.1:8102 --policy prefix-cache

    python3 gateway.py --policy lora-affinity --models llama-3-8b \\
        --max-loras 4 --backend e1=127.0.0.1:8101 \\
        --backend e2=127.0.0.1:8102,models=qwen-7b+qwen,max_loras=2 \\
        --adapter sql-lora=llama-3-8b

Needs the libroute Python package on PYTHONPATH (bindings/python).
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import itertools
import json
import re
import threading
import time
import uuid
from array import array
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import libroute
from libroute import Router, text_tokens

from fake_engine import prompt_text
from waiting import (Admission, Classifier, Waiting, parse_objectives,
                     parse_slo)

try:
    from metrics import GatewayMetrics
    _NO_METRICS = ""
except ImportError as _e:  # python3-prometheus-client is not installed
    GatewayMetrics = None  # type: ignore[assignment,misc]
    _NO_METRICS = str(_e)

_METRIC = re.compile(r"^((?:vllm|llamacpp|sglang):[a-z_]+)(?:\{[^}]*\})?\s+"
                     r"([0-9.eE+-]+|NaN)\s*$")
# An engine's running and waiting requests and KV use, by the names vLLM,
# llama.cpp and SGLang give them: the first name present wins. llama.cpp
# has no KV-use gauge.
_RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing",
            "sglang:num_running_reqs")
_WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred",
            "sglang:num_queue_reqs")
_KV_USE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
           "sglang:token_usage")

# vLLM's LoRA gauge: one sample per label set it has seen, its value the
# time it was set; the latest (largest) is the engine's word now.
_LORA_INFO = re.compile(r"^vllm:lora_requests_info\{([^}]*)\}\s+"
                        r"([0-9.eE+-]+)\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# Adapter slots and names the router follows per instance.
_MAX_ADAPTERS = libroute.constants["LR_ROUTER_MAX_ADAPTERS"]

# Deadlines past the router's clock (LR_ROUTER_MAX_TIME_NS) are cut there.
_MAX_TIME_NS = 1 << 60

# The engine's native completion endpoint (llama.cpp's), routed like the
# OpenAI ones.
PATHS = ("/v1/completions", "/v1/chat/completions", "/completion",
         "/completions")


def now_ns() -> int:
    return time.monotonic_ns()


def engine_stats(text: str) -> Optional[Tuple[int, int, float, str]]:
    """(running, waiting, KV use, family) from a /metrics text, or None
    when it has none of the known names."""
    m: Dict[str, float] = {}
    for line in text.splitlines():
        g = _METRIC.match(line)
        if g:
            try:
                m[g.group(1)] = float(g.group(2))
            except ValueError:
                pass

    def first(names: Tuple[str, ...]) -> Tuple[Optional[float], str]:
        for n in names:
            v = m.get(n)
            if v is not None and v == v:  # not NaN
                return v, n
        return None, ""

    running, name = first(_RUNNING)
    if running is None:
        return None
    kv = first(_KV_USE)[0] or 0.0
    return (int(max(running, 0)), int(max(first(_WAITING)[0] or 0, 0)),
            min(max(kv, 0.0), 1.0), name.split(":")[0])


class LoraInfo(NamedTuple):
    """vLLM's `vllm:lora_requests_info` gauge: the adapters with requests
    running and waiting on the engine, and its slots (max_lora)."""

    running: List[str]
    waiting: List[str]
    max_lora: int


def lora_info(text: str) -> Optional[LoraInfo]:
    """The latest `vllm:lora_requests_info` sample of a /metrics text
    (vLLM keeps every label set it has set, each valued with the time it
    was set), or None when there is none. The adapter labels are
    comma-separated names."""
    best: Optional[Tuple[float, Dict[str, str]]] = None
    for line in text.splitlines():
        m = _LORA_INFO.match(line)
        if not m:
            continue
        try:
            t = float(m.group(2))
        except ValueError:
            continue
        if best is None or t >= best[0]:
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                      for k, v in _LABEL.findall(m.group(1))}
            best = (t, labels)
    if best is None:
        return None
    lab = best[1]

    def names(key: str) -> List[str]:
        return [n for n in (s.strip() for s in lab.get(key, "").split(","))
                if n]

    try:
        max_lora = int(float(lab.get("max_lora", "0")))
    except ValueError:
        max_lora = 0
    return LoraInfo(names("running_lora_adapters"),
                    names("waiting_lora_adapters"), max(max_lora, 0))


def adapter_parents(data: Union[bytes, str], models: Any
                    ) -> Optional[Dict[str, str]]:
    """The adapters an engine's GET /v1/models lists, each with its base
    model: vLLM lists its base models (`parent` null) and every LoRA
    adapter it serves (`--lora-modules`, loaded at runtime or resolved)
    as `{"id": ADAPTER, "parent": BASE, ...}`. An entry counts only when
    its parent is among `models` (the backend's served names, or the
    fleet's) and its id is not; None when the answer is no model list."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    rows = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        return None
    out: Dict[str, str] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        name, parent = row.get("id"), row.get("parent")
        if (isinstance(name, str) and name and isinstance(parent, str)
                and parent in models and name not in models):
            out[name] = parent
    return out


def parse_adapters(specs: List[str]) -> Dict[str, str]:
    """--adapter NAME=BASE values as {adapter: base model}."""
    out: Dict[str, str] = {}
    for spec in specs:
        name, eq, base = spec.partition("=")
        if not eq or not name or not base:
            raise ValueError(f"{spec!r}: expected NAME=BASE")
        out[name] = base
    return out


def role_name(role: Any) -> str:
    """A backend's role as its lowercase name ("both", "prefill",
    "decode"), from a name (any case), a libroute.Role or its int;
    ValueError for anything else."""
    try:
        if isinstance(role, str):
            return libroute.Role[role.upper()].name.lower()
        if isinstance(role, int) and not isinstance(role, bool):
            return libroute.Role(role).name.lower()
    except (KeyError, ValueError):
        pass
    raise ValueError(f"role {role!r}: expected both, prefill or decode")


# vLLM's disaggregated serving (its NixlConnector's toy proxy, llm-d's
# routing sidecar): what the prefill leg asks of the prefill instance.
_PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                   "remote_engine_id": None, "remote_block_ids": None,
                   "remote_host": None, "remote_port": None}


def prefill_body(body: Dict[str, Any]) -> Dict[str, Any]:
    """The prefill leg of a split request: the client's request asking
    for the prompt's KV to be kept for a remote decode
    (`kv_transfer_params.do_remote_decode`), not streamed, one token
    (`max_tokens` 1, and `max_completion_tokens` 1 when given), without
    `stream_options`, `min_tokens` and `min_completion_tokens`."""
    out = dict(body)
    out["kv_transfer_params"] = dict(_PREFILL_PARAMS)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    for k in ("stream_options", "min_tokens", "min_completion_tokens"):
        out.pop(k, None)
    return out


def decode_body(body: Dict[str, Any],
                params: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The decode leg: the client's request as it came (its stream,
    max_tokens and the rest) with the `kv_transfer_params` the prefill
    leg answered, verbatim; without any (an engine with no KV
    connector), the request as it came: the decode instance prefills
    it."""
    out = dict(body)
    if params is not None:
        out["kv_transfer_params"] = params
    return out


class UnknownModel(Exception):
    """A request's `model` is neither a base model of the fleet nor, in a
    fleet with adapter slots, an adapter: 404, as vLLM answers."""


def observed_cached(obj: Any) -> Optional[int]:
    """The prompt tokens an engine says it reused, from an answer or a
    stream event: llama.cpp's `timings.cache_n`, vLLM's and SGLang's (and
    OpenAI's) `usage.prompt_tokens_details.cached_tokens`."""
    if not isinstance(obj, dict):
        return None
    t = obj.get("timings")
    if isinstance(t, dict) and isinstance(t.get("cache_n"), int):
        return t["cache_n"]
    try:
        return int(obj["usage"]["prompt_tokens_details"]["cached_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def engine_prompt_tokens(obj: Any) -> Optional[int]:
    """The prompt tokens in the engine's own count, from the same answer:
    llama.cpp's `timings.prompt_n + cache_n`, or `usage.prompt_tokens`."""
    if not isinstance(obj, dict):
        return None
    t = obj.get("timings")
    if isinstance(t, dict) and isinstance(t.get("cache_n"), int) and \
            isinstance(t.get("prompt_n"), int):
        return t["cache_n"] + t["prompt_n"]
    try:
        return int(obj["usage"]["prompt_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def in_router_tokens(observed: int, engine_prompt: Optional[int],
                     routed: int) -> int:
    """An engine's count of reused tokens in the router's tokens: the
    same when the router saw the engine's tokens (or the engine's prompt
    size is unknown), else scaled by routed / engine_prompt; at most the
    prompt routed."""
    if engine_prompt and engine_prompt != routed:
        observed = round(observed * routed / engine_prompt)
    return max(0, min(observed, routed))


def output_tokens(obj: Any) -> Optional[int]:
    """An answer's output tokens: `usage.completion_tokens` (OpenAI), or
    llama.cpp's native `tokens_predicted`."""
    if not isinstance(obj, dict):
        return None
    try:
        return int(obj["usage"]["completion_tokens"])
    except (KeyError, TypeError, ValueError):
        pass
    n = obj.get("tokens_predicted")
    return n if isinstance(n, int) else None


class _NoMetrics:
    """Stands in for GatewayMetrics without prometheus_client: every
    event is dropped, and /metrics says what is missing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Backend:
    def __init__(self, name: str, host: str, port: int, ident: int,
                 models: Tuple[str, ...] = (), max_loras: int = 0,
                 role: str = "both",
                 placement: Tuple[int, int, int] = (0, 0, 0)) -> None:
        self.name, self.host, self.port, self.id = name, host, port, ident
        # The model names it serves (none: any) and its LoRA slots (0:
        # not declared; a scrape's max_lora may tell).
        self.models, self.max_loras = models, max_loras
        # Its part in a disaggregated fleet ("both", "prefill",
        # "decode") and its (node, rack, region), 0 unknown.
        self.role, self.placement = role, placement
        self.adapters: List[str] = []  # its last lora_requests_info
        # The adapters its last GET /v1/models listed, with their base
        # model; None while it has listed none (or has no such endpoint).
        self.parents: Optional[Dict[str, str]] = None
        self.up = True
        # Where its load comes from: "vllm", "llamacpp" or "sglang"
        # (/metrics), "slots" (llama.cpp's /slots), "none", or "" before
        # the first scrape.
        self.metrics = ""
        self.last_answer = time.monotonic()  # of any probe
        # Cached prompt tokens over the requests whose engine reported
        # them: what the router predicted, what the engine reused.
        self.predicted = self.observed = self.reports = 0


class TokenizeError(Exception):
    """No backend could tokenize the prompt (--tokenize)."""


class Choice(NamedTuple):
    """Where a request goes and why, from route()'s Decision or from the
    entry dispatch() let out of the queue: what the response headers and
    the metrics say of it. A split decision (disaggregated prefill and
    decode) names the instance that prefills it (`prefill`), why
    (`prefill_reason`; "whole" when the rule kept it whole, "" when the
    fleet has no prefill instance) and the KV transfer's expected
    seconds; `instance` decodes it."""

    instance: int
    reason: str
    decider: str
    cached_tokens: int
    prefill: Optional[int] = None
    prefill_reason: str = ""
    transfer_s: float = 0.0

    @staticmethod
    def of(d: "libroute.Decision") -> "Choice":
        return Choice(d.instance, d.reason.label,
                      d.decider.label if d.decider is not None else "",
                      d.cached_tokens, d.prefill_instance,
                      d.prefill_reason.label
                      if d.prefill_reason is not None else "",
                      d.transfer_s)

    @staticmethod
    def of_dispatched(e: "libroute.Dispatched", decider: str) -> "Choice":
        """A request dispatch() let out (Status.OK), routed by `decider`
        (the router's policy): its decode instance and, when the router
        split it, its prefill leg."""
        return Choice(e.instance, e.reason.label, decider, e.cached_tokens,
                      e.prefill_instance,
                      e.prefill_reason.label
                      if e.prefill_reason is not None else "",
                      e.transfer_s)


class Refusal(NamedTuple):
    """A request the queue turned away: its status, why (the
    X-Libroute-Dropped header: shed, queue-full, expired, dropped) and
    the error message."""

    code: int
    dropped: str
    message: str


# _Handler._choose's other outcomes: nothing is routable; the client hung
# up while its request waited (withdrawn: nothing to answer).
_NOWHERE = object()
_GONE = object()
# _Handler._prefill_leg's outcomes besides its params: route the request
# again (the prefill instance refused it); the client has its answer.
_RETRY = object()
_ANSWERED = object()


class Gateway:
    """The routing state shared by the handler threads."""

    def __init__(self, backends: List[Tuple[Any, ...]], *,
                 policy: str = "prefix-cache", scrape_s: float = 0.1,
                 health_s: float = 0.25, timeout_s: float = 30.0,
                 router_options: Optional[Dict[str, Any]] = None,
                 prepare: Optional[Any] = None,
                 learn: bool = True,
                 index_capacity_blocks: Optional[int] = None,
                 learn_every: Optional[int] = None,
                 engine_tokenizer: bool = False,
                 probe_timeout_s: float = 1.0,
                 dead_after_s: float = 5.0,
                 queue: bool = True,
                 saturation_queue: Optional[int] = None,
                 saturation_kv: Optional[float] = None,
                 queue_capacity: Optional[int] = None,
                 ttft_slo_s: Optional[Dict[int, float]] = None,
                 objectives: Optional[Dict[str, int]] = None,
                 dispatch_s: float = 0.1,
                 adapters: Optional[Dict[str, str]] = None) -> None:
        # learn_every: Lodestar trains on its first `learn_every` samples
        # and again after each `learn_every` more (None: the library's
        # schedule). engine_tokenizer: text prompts are tokenized by a
        # backend's /tokenize (llama.cpp's), not by the text helper.
        # queue: a request may wait in the router's queue while the fleet
        # is saturated (waiting.py); False routes every one at once.
        # saturation_queue, saturation_kv: the library's saturation
        # thresholds (Param.SATURATION_QUEUE, SATURATION_KV; None: its
        # defaults); queue_capacity: requests waiting at once;
        # ttft_slo_s: the deadline of each urgency's requests that carry
        # no SLO header (the rest: timeout_s); objectives: the priority of
        # each InferenceObjective name; dispatch_s: the dispatch timer.
        # backends: (name, host, port[, models[, max_loras[, role[, node[,
        # rack[, region]]]]]]) (parse_backend's tuple): the model names
        # it serves (none: any), its LoRA adapter slots, its part in a
        # disaggregated fleet ("both", "prefill", "decode") and its
        # placement (0: unknown).
        # adapters: {adapter: base model} (--adapter), over what the
        # engines' /v1/models list; ValueError when a base is none of the
        # fleet's or an adapter is a base model.
        opts = dict(router_options or {})
        if index_capacity_blocks is not None:
            opts["index_capacity_blocks"] = index_capacity_blocks
        if queue_capacity is not None:
            opts["queue_capacity"] = queue_capacity
        if learn_every is not None:
            opts["learner"] = {"min_samples": learn_every,
                               "retrain_every": learn_every}
        self.router = Router(policy, seed=1, **opts)
        # A replica restarting restores its router first (fleet.py), then
        # finds the backends the snapshot names.
        self.restored = bool(prepare(self.router)) if prepare else False
        if saturation_queue is not None:
            self.router.set_param(libroute.Param.SATURATION_QUEUE,
                                  saturation_queue)
        if saturation_kv is not None:
            self.router.set_param(libroute.Param.SATURATION_KV, saturation_kv)
        self.learn = learn  # False: the engines' KV events are the truth
        self.engine_tokenizer = engine_tokenizer
        self.on_backend_up: List[Any] = []  # callbacks (Backend)
        self.status_parts: Dict[str, Any] = {}  # name -> () -> dict
        self.backends: Dict[int, Backend] = {}
        for spec in backends:
            name, host, port = spec[:3]
            models = tuple(spec[3]) if len(spec) > 3 and spec[3] else ()
            max_loras = int(spec[4]) if len(spec) > 4 and spec[4] else 0
            role = role_name(spec[5] if len(spec) > 5 and spec[5] else
                             "both")
            placement = tuple(int(x) if x else 0
                              for x in (tuple(spec[6:9]) + (0, 0, 0))[:3])
            try:
                ident = self.router.find_instance(name)
                # drained when the snapshot was taken: the health checks
                # below drain it again if it still is down (a snapshot
                # keeps roles and placements)
                self.router.drain_instance(ident, False)
            except libroute.NotFoundError:
                ident = self.router.add_instance(
                    name, models=list(models),
                    max_adapters=min(max_loras, _MAX_ADAPTERS), role=role,
                    node=placement[0], rack=placement[1],
                    region=placement[2])
            self.backends[ident] = Backend(name, host, port, ident, models,
                                           max_loras, role, placement)
        # Prefill backends: requests may be split (disaggregated).
        self.has_prefill = any(b.role == "prefill"
                               for b in self.backends.values())
        # The fleet's base models (every backend's served names): a
        # request's model among them is one; any other is an adapter.
        self.base_models = frozenset(m for b in self.backends.values()
                                     for m in b.models)
        self.adapter_flags = dict(adapters or {})
        for name, base in self.adapter_flags.items():
            if base not in self.base_models:
                self.router.close()
                raise ValueError(f"adapter {name}: {base!r} is none of "
                                 "the fleet's base models")
            if name in self.base_models:
                self.router.close()
                raise ValueError(f"adapter {name}: a base model")
        # Each adapter's base model: the flags', else the one every
        # backend listing it names (model_of reads it without the lock;
        # _merge_parents replaces it whole).
        self.adapter_bases: Dict[str, str] = dict(self.adapter_flags)
        self.ids = itertools.count(1)
        self.tok_turn = itertools.count()
        self.lock = threading.Lock()
        self.scrape_s, self.health_s, self.timeout_s = (scrape_s, health_s,
                                                         timeout_s)
        self.probe_timeout_s, self.dead_after_s = (probe_timeout_s,
                                                   dead_after_s)
        self.stop = threading.Event()
        self.retries = 0
        self.failures = 0  # requests (tries) told to the router as failed
        # Disaggregated prefill and decode: prefill legs sent, ended
        # (prefill_done), failed, and answered without kv_transfer_params
        # (the decode leg then prefills the whole prompt itself).
        self.pd = {"prefill_legs": 0, "prefill_done": 0,
                   "prefill_failures": 0, "without_params": 0}
        self.metrics: Any = (_NoMetrics() if GatewayMetrics is None else
                             GatewayMetrics(self.router, self._backend_rows))
        self.classifier = Classifier(objectives=objectives,
                                     ttft_slo_s=ttft_slo_s,
                                     default_slo_s=timeout_s)
        self.waiting: Optional[Waiting] = None
        if queue:
            self.waiting = Waiting(lambda: self.router, tick_s=dispatch_s)
            self.metrics.enable_queue(
                lambda: self.router.saturated(now_ns()))
        self.threads = [threading.Thread(target=self._watch, args=(b,),
                                         daemon=True)
                        for b in self.backends.values()]
        self.threads.append(threading.Thread(target=self._learn_loop,
                                             daemon=True))
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        if self.waiting is not None:
            self.waiting.close()
        self.router.close()

    def kick(self) -> None:
        """Capacity may have freed (a first token, a completion, a
        failure, a scrape, a backend back up): let waiting requests out."""
        if self.waiting is not None:
            self.waiting.kick()

    def any_up(self) -> bool:
        return any(b.up for b in self.backends.values())

    # ---- backend health -------------------------------------------------

    def mark_down(self, b: Backend) -> None:
        with self.lock:
            if not b.up:
                return
            b.up = False
        try:
            self.router.drain_instance(b.id, True)
        except libroute.LrError:
            pass

    def _mark_up(self, b: Backend) -> None:
        with self.lock:
            if b.up:
                return
            b.up = True
        self.router.drain_instance(b.id, False)
        for fn in self.on_backend_up:  # it restarted: its cache is empty
            fn(b)
        self.kick()

    def _fetch(self, b: Backend, method: str, path: str,
               body: Optional[bytes] = None,
               timeout: Optional[float] = None) -> Tuple[int, bytes]:
        """(status, body) of one request to b; OSError (socket.timeout
        included) when it does not answer."""
        c = http.client.HTTPConnection(
            b.host, b.port, timeout=timeout or self.probe_timeout_s)
        try:
            c.request(method, path, body,
                      {"Content-Type": "application/json"} if body else {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def _get(self, b: Backend, path: str) -> Optional[str]:
        try:
            status, data = self._fetch(b, "GET", path)
        except OSError:
            return None
        return data.decode("utf-8", "replace") if status == 200 else None

    def _watch(self, b: Backend) -> None:
        """One backend's probes: /health (the RTT and whether it is up),
        then its load (/metrics, or /slots)."""
        period = self.scrape_s
        while not self.stop.wait(period):
            period = self.scrape_s if b.up else self.health_s
            t0 = now_ns()
            try:
                status, _ = self._fetch(b, "GET", "/health")
            except ConnectionError:  # refused, reset: nothing listens
                self.mark_down(b)
                continue
            except OSError:  # no answer in time: busy, or hung
                if time.monotonic() - b.last_answer > self.dead_after_s:
                    self.mark_down(b)
                continue
            t1 = now_ns()
            b.last_answer = time.monotonic()
            if status != 200:  # llama.cpp answers 503 while it loads
                self.mark_down(b)
                continue
            self._mark_up(b)
            try:
                self.router.observe_rtt(b.id, t1 - t0)
                self._scrape(b)
                self._models(b)
            except libroute.ClosedError:
                return
            except libroute.LrError:
                pass  # refused (a clock the host set apart): next round

    def _scrape(self, b: Backend) -> None:
        """The engine's load into the router. A late or failed answer is
        skipped: /health alone says whether the backend is up."""
        text = None  # the /metrics page, when read
        if b.metrics in ("slots", "none"):
            st = self._slots(b)
        else:
            try:
                status, data = self._fetch(b, "GET", "/metrics",
                                           timeout=2 * self.probe_timeout_s)
            except OSError:
                return
            if status in (404, 501):  # llama.cpp without --metrics: 501
                b.metrics = "slots"
                st = self._slots(b)
            elif status != 200:
                return
            else:
                text = data.decode("utf-8", "replace")
                st = engine_stats(text)
                if st is not None:
                    b.metrics = st[3]
        if st is not None:
            self.router.set_stats(b.id, running=st[0], waiting=st[1],
                                  kv_use=st[2], scraped_ns=now_ns())
            self.kick()
        if text is not None and b.metrics == "vllm":
            self._adapters(b, text)

    def _adapters(self, b: Backend, text: str) -> None:
        """vLLM's lora_requests_info into the router: the adapters
        resident there and its slots. A report the router refuses (a name
        too long, more adapters than it follows) is skipped."""
        info = lora_info(text)
        if info is None:
            return
        with self.lock:
            b.adapters = info.running + info.waiting
            if info.max_lora:
                b.max_loras = info.max_lora
        try:
            self.router.set_adapters(
                b.id, running=info.running, waiting=info.waiting,
                max_adapters=min(info.max_lora, _MAX_ADAPTERS),
                scraped_ns=now_ns())
        except (libroute.InvalidArgumentError, libroute.OutOfRangeError):
            pass

    def _models(self, b: Backend) -> None:
        """The adapters b's GET /v1/models lists, with their base models
        (adapter_parents; a parent counts when b serves it, or, for a
        backend that declares no models, when the fleet does): an
        adapter loaded at runtime is known from the next scrape, one
        unloaded forgotten. A fleet that declares no models routes by
        none and does not ask; a late or failed answer is skipped."""
        if not self.base_models:
            return
        try:
            status, data = self._fetch(b, "GET", "/v1/models",
                                       timeout=2 * self.probe_timeout_s)
        except OSError:
            return
        parents = adapter_parents(data, b.models or self.base_models) \
            if status == 200 else None
        if parents is None or parents == (b.parents or {}):
            return
        with self.lock:
            b.parents = parents
            self._merge_parents()

    def _merge_parents(self) -> None:
        """adapter_bases anew (caller holds the lock): the flags', then
        each listed adapter whose backends agree on its base model; one
        listed with two bases stays unknown (model_of's rule for an
        adapter of no known base)."""
        listed: Dict[str, Optional[str]] = {}
        for b in self.backends.values():
            for name, base in (b.parents or {}).items():
                listed[name] = (base if listed.get(name, base) == base
                                else None)
        bases = {n: p for n, p in listed.items() if p is not None}
        bases.update(self.adapter_flags)
        self.adapter_bases = bases

    def _slots(self, b: Backend) -> Optional[Tuple[int, int, float, str]]:
        """Running requests from llama.cpp's /slots (busy slots)."""
        try:
            status, data = self._fetch(b, "GET", "/slots",
                                       timeout=2 * self.probe_timeout_s)
        except OSError:
            return None
        if status in (404, 501):
            b.metrics = "none"
            return None
        try:
            rows = json.loads(data) if status == 200 else None
            running = sum(1 for s in rows if s.get("is_processing"))
        except (ValueError, TypeError, AttributeError):
            return None
        b.metrics = "slots"
        return running, 0, 0.0, "slots"

    def _learn_loop(self) -> None:
        """Lodestar's training, off the request path: route() never waits
        for it. Other policies have no learner (StateError): the loop
        keeps asking, so a switch to lodestar starts training."""
        while not self.stop.wait(0.2):
            try:
                self.router.learn_step()
            except libroute.StateError:
                pass
            except libroute.ClosedError:
                return

    def _backend_rows(self) -> List[Tuple[int, str, bool]]:
        return [(b.id, b.name, b.up) for b in self.backends.values()]

    # ---- requests -------------------------------------------------------

    def model_of(self, body: Dict[str, Any]) -> Tuple[Optional[str],
                                                      Optional[str]]:
        """(model, adapter) for the router from a request's `model`: a
        base model of the fleet is the model; any other name is a LoRA
        adapter (vLLM serves adapters under their own names), routed to
        its base model when known (--adapter, or the engines' /v1/models:
        adapter_bases), else to a model that every backend with adapter
        slots serves, or to any backend when they serve none in common.
        A fleet that declares no models routes by no model; a name of no
        known base that is no base model, where no backend has adapter
        slots (declared or scraped), raises UnknownModel."""
        name = body.get("model")
        if not self.base_models or name is None or name == "":
            return None, None
        if not isinstance(name, str):
            raise ValueError("model: expected a string")
        if name in self.base_models:
            return name, None
        base = self.adapter_bases.get(name)
        if base is not None:
            return base, name
        lora = [b for b in self.backends.values()
                if b.max_loras > 0 or b.adapters]
        if not lora:
            raise UnknownModel(name)
        # The adapter goes where adapters are served: to a model every
        # backend with adapter slots serves (their base model), when
        # there is one; else anywhere.
        common = frozenset(lora[0].models).intersection(
            *(b.models for b in lora[1:]))
        return (min(common) if common else None), name

    def tokenize(self, body: Dict[str, Any],
                 path: str = "/v1/chat/completions") -> Tuple[array, array]:
        """The prompt's tokens and message ends (see the module doc): token
        ids as given; the engine's tokens (engine_tokenizer); or the text
        helper's: the messages joined as the engine reads them, cut once,
        each message's end rounded down to a whole token, the last one the
        whole prompt. A conversation's history is a byte prefix of its
        next turn, so its whole tokens start the next turn's
        (examples/go-gateway cuts the same way)."""
        prompt = body.get("prompt")
        if "messages" not in body and isinstance(prompt, list):
            toks = token_ids(prompt)
            return toks, array("I", [len(toks)])
        if self.engine_tokenizer:
            return self._engine_tokens(body)
        parts, text = prompt_text(body)
        toks = text_tokens(text)
        ends = array("I")
        end = 0
        for p in parts:
            end += len(p.encode("utf-8"))
            ends.append(end // 4)
        if ends:
            ends[-1] = len(toks)
        return toks, ends

    def _engine_tokens(self, body: Dict[str, Any]) -> Tuple[array, array]:
        """Tokens from a live backend's /tokenize (with BOS, as the engine
        reads a prompt); chat messages are rendered by its /apply-template
        first, and each message's end is found in the rendered text and
        turned into a token offset through the tokens' pieces."""
        ups = [b for b in self.backends.values() if b.up]
        if not ups:
            raise TokenizeError("no backend is up")
        start = next(self.tok_turn)
        err = "no backend answered"
        for k in range(len(ups)):
            b = ups[(start + k) % len(ups)]
            try:
                return self._tokens_from(b, body)
            except OSError as e:
                err = f"{b.name}: {e}"
            except TokenizeError as e:
                err = f"{b.name}: {e}"
        raise TokenizeError(err)

    def _post_json(self, b: Backend, path: str, obj: Any) -> Any:
        status, data = self._fetch(b, "POST", path, json.dumps(obj).encode(),
                                   timeout=self.timeout_s)
        if status != 200:
            raise TokenizeError(f"{path}: HTTP {status}")
        try:
            return json.loads(data)
        except ValueError:
            raise TokenizeError(f"{path}: not JSON") from None

    def _tokens_from(self, b: Backend,
                     body: Dict[str, Any]) -> Tuple[array, array]:
        contents: List[str] = []
        if "messages" in body:
            msgs = body["messages"]
            if not isinstance(msgs, list) or not all(isinstance(m, dict)
                                                     for m in msgs):
                raise ValueError("messages: each must be an object")
            contents = [str(m.get("content", "")) for m in msgs]
            text = self._post_json(b, "/apply-template",
                                   {"messages": msgs}).get("prompt")
            if not isinstance(text, str):
                raise TokenizeError("/apply-template: no prompt")
        else:
            text = body.get("prompt", "")
            if not isinstance(text, str):
                raise ValueError("prompt: expected a string or token ids")
        got = self._post_json(b, "/tokenize", {
            "content": text, "add_special": True,
            "with_pieces": bool(contents)}).get("tokens")
        if not isinstance(got, list):
            raise TokenizeError("/tokenize: no tokens")
        if not contents:
            toks = token_ids(got)
            return toks, array("I", [len(toks)])
        toks = token_ids([t.get("id") if isinstance(t, dict) else t
                          for t in got])
        return toks, piece_ends(text, got, contents)

    def fail(self, rid: int) -> None:
        """Request rid ended without an answer."""
        with self.lock:
            self.failures += 1
        self.router.fail(rid, now_ns=now_ns())
        self.kick()

    def on_observed(self, rid: int, b: Backend, d: Choice,
                    observed: int) -> None:
        """The engine reused `observed` prompt tokens of request `rid`
        (in the router's tokens: see in_router_tokens), for which the
        router predicted d.cached_tokens. Called once per request whose
        engine reports it, before the request ends: the router learns from
        it how much of its predicted hits each engine delivers
        (Router.observe_cached; adaptive discounts the rest)."""
        try:
            self.router.observe_cached(rid, observed, now_ns=now_ns())
        except libroute.LrError:
            pass  # ended already (a stream cut short): nothing to learn
        self.metrics.on_cached(d.cached_tokens, observed)
        with self.lock:
            b.predicted += d.cached_tokens
            b.observed += observed
            b.reports += 1

    def status(self) -> Dict[str, Any]:
        s = self.router.stats()
        return {
            "policy": self.router.policy.label,
            "backends": [{"name": b.name, "id": b.id, "up": b.up,
                          "role": b.role,
                          "placement": dict(zip(("node", "rack", "region"),
                                                b.placement)),
                          "inflight": self.router.instance_load(b.id).inflight,
                          "metrics": b.metrics,
                          "models": list(b.models),
                          "max_loras": b.max_loras,
                          "adapters": len(self.router.adapters(b.id)),
                          "cached_tokens": {"predicted": b.predicted,
                                            "observed": b.observed,
                                            "requests": b.reports}}
                         for b in self.backends.values()],
            "routes": s.routes,
            # Decisions by reason, every reason the library has.
            "reasons": {r.label: n for r, n in
                        self.router.reason_counts().items() if n},
            "inflight": s.inflight,
            "adapter_routes": s.adapter_routes,
            "adapter_loads": s.adapter_loads,
            # Each adapter's base model (--adapter, /v1/models).
            "adapter_bases": dict(sorted(self.adapter_bases.items())),
            "retries": self.retries,
            "failures": self.failures,
            "pd": dict(self.pd),
            "restored": self.restored,
            **({"queue": {
                "saturated": self.router.saturated(now_ns()),
                "waiting": s.waiting, "waited": s.waited,
                "dispatched": s.waited_dispatched,
                "expired": s.waited_expired,
                "cancelled": s.waited_cancelled,
                "dropped": s.waited_dropped, "shed": s.shed,
            }} if self.waiting is not None else {}),
            "replicas": {
                "kv_batches": s.kv_batches, "kv_duplicates": s.kv_duplicates,
                "kv_gaps": s.kv_gaps, "kv_restarts": s.kv_restarts,
                "deltas_exported": s.deltas_exported,
                "deltas_imported": s.deltas_imported,
                "deltas_skipped": s.deltas_skipped,
                "gauges_imported": s.gauges_imported,
                "peers_live": s.peers_live,
                **{k: fn() for k, fn in self.status_parts.items()},
            },
        }


def token_ids(obj: Any) -> array:
    """A list of token ids as the uint32 array the binding takes without
    a copy (libroute.Router.route's fast path)."""
    try:
        return array("I", obj)
    except (TypeError, OverflowError):
        raise ValueError("prompt: token ids must be integers in "
                         "0..2**32-1") from None


def piece_ends(text: str, pieces: List[Any], contents: List[str]) -> array:
    """Each message's end as a token offset: the end of its content in the
    rendered `text`, found in order, and the tokens whose pieces end at or
    before it. A special token whose piece is not in the text (BOS)
    counts as a token and no bytes."""
    data = text.encode("utf-8")
    ends_b = []
    pos = 0
    for c in contents:
        i = text.find(c, pos) if c else -1
        if i >= 0:
            pos = i + len(c)
        ends_b.append(len(text[:pos].encode("utf-8")))
    offs = []  # byte offset after each token
    at = 0
    for t in pieces:
        p = t.get("piece", "") if isinstance(t, dict) else ""
        pb = bytes(p) if isinstance(p, list) else str(p).encode("utf-8")
        if pb and data.startswith(pb, at):
            at += len(pb)
        elif pb and data.startswith(pb.lstrip(b" "), at):
            at += len(pb.lstrip(b" "))  # a word's added leading space
        offs.append(at)
    out = array("I")
    k = 0
    for e in ends_b:
        while k < len(offs) and offs[k] <= e:
            k += 1
        out.append(k)
    if out:
        out[-1] = len(pieces)
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "libroute-gateway/0.1"
    protocol_version = "HTTP/1.0"

    @property
    def gw(self) -> Gateway:
        return self.server.gateway  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any,
              extra: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/status":
            self._json(200, self.gw.status())
        elif self.path == "/metrics":
            self._metrics()
        else:
            self._json(404, {"error": "not found"})

    def _metrics(self) -> None:
        m = self.gw.metrics
        if isinstance(m, _NoMetrics):
            self._json(503, {"error": "no metrics: python3-prometheus-client "
                                      f"is missing ({_NO_METRICS})"})
            return
        data, ctype = m.exposition()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        if self.path not in PATHS:
            self._json(404, {"error": "not found"})
            return
        gw = self.gw
        try:
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n)
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            # without the queue the headers are not read
            adm = (gw.classifier.classify(self.headers)
                   if gw.waiting is not None else None)
            model, adapter = gw.model_of(body)
            toks, ends = gw.tokenize(body, self.path)
            # OpenAI's max_tokens, or llama.cpp's n_predict (-1: no limit)
            max_tokens = int(body.get("max_tokens",
                                      body.get("n_predict", 16)))
            max_tokens = max(max_tokens, 0)
        except (ValueError, TypeError) as e:
            gw.metrics.on_response(400)
            self._json(400, {"error": f"bad request: {e}"})
            return
        except UnknownModel as e:
            self._unknown_model(str(e))
            return
        except TokenizeError as e:
            gw.metrics.on_response(503)
            self._json(503, {"error": f"no tokenizer: {e}"})
            return
        rid = next(gw.ids)
        # the TTFT deadline counts from the request's arrival, across tries
        deadline = (min(now_ns() + int(adm.slo_s * 1e9), _MAX_TIME_NS)
                    if adm is not None else 0)
        for _ in range(len(gw.backends)):
            t0 = now_ns()
            send, heads = raw, {"Content-Type": "application/json"}
            try:
                d = self._choose(rid, toks, ends, max_tokens, adm, deadline,
                                 t0, model, adapter)
            except libroute.NotFoundError:  # no backend serves the model
                self._unknown_model(str(model))
                return
            except libroute.InvalidArgumentError as e:  # a name too long
                gw.metrics.on_response(400)
                self._json(400, {"error": f"bad request: {e}"})
                return
            if d is _GONE:
                return  # the client hung up while it waited
            if d is _NOWHERE:
                break  # every backend drained
            if isinstance(d, Refusal):
                gw.metrics.on_response(d.code)
                extra = {"X-Libroute-Dropped": d.dropped}
                if d.code == 429:
                    extra["Retry-After"] = "1"
                self._json(d.code, {"error": d.message}, extra)
                return
            assert isinstance(d, Choice)
            if d.prefill is not None:  # split: the prefill leg first
                xid = f"libroute-{uuid.uuid4().hex}"
                leg = self._prefill_leg(rid, d, body, xid)
                if leg is _RETRY:
                    continue
                if leg is _ANSWERED:
                    return
                assert isinstance(leg, tuple)
                heads["X-Request-Id"] = xid
                if leg[0] is not None:
                    send = json.dumps(decode_body(body, leg[0])).encode()
            b = gw.backends[d.instance]
            conn = http.client.HTTPConnection(b.host, b.port,
                                              timeout=gw.timeout_s)
            try:
                conn.request("POST", self.path, send, heads)
                resp = conn.getresponse()
            except ConnectionError:  # refused or reset: retry elsewhere
                conn.close()
                self._refused(rid, b)
                continue
            except OSError as e:  # no answer in time: busy, not gone
                conn.close()
                gw.fail(rid)
                gw.metrics.on_response(504)
                self._json(504, {"error": f"backend {b.name}: {e}"})
                return
            if resp.status == 503:  # not ready (llama.cpp while loading)
                conn.close()
                self._refused(rid, b)
                continue
            self._relay(rid, b, d, conn, resp, bool(body.get("stream")), t0,
                        len(toks))
            return
        gw.metrics.on_response(503)
        self._json(503, {"error": "no backend available"})

    def _unknown_model(self, name: str) -> None:
        """404 as vLLM answers a model it does not serve (OpenAI's error
        object)."""
        self.gw.metrics.on_response(404)
        self._json(404, {"error": {
            "message": f"The model `{name}` does not exist.",
            "type": "NotFoundError", "param": "model", "code": 404}})

    def _choose(self, rid: int, toks: array, ends: array, max_tokens: int,
                adm: Optional[Admission], deadline: int, t0: int,
                model: Optional[str] = None,
                adapter: Optional[str] = None
                ) -> Union[Choice, Refusal, object]:
        """Where request rid goes: route() now, or, with the queue, route()
        with may_wait and, when the router holds it, the entry dispatch()
        lets out for it. A Choice (recorded in flight), a Refusal, _NOWHERE
        (nothing routable) or _GONE (the client hung up while it waited:
        withdrawn)."""
        gw = self.gw
        if gw.waiting is None or adm is None:
            try:
                d = gw.router.route(toks, request_id=rid, now_ns=t0,
                                    boundaries=ends, learn=gw.learn,
                                    expected_output_tokens=max_tokens,
                                    model=model, adapter=adapter)
            except libroute.StateError:
                return _NOWHERE
            gw.metrics.on_route(d, (now_ns() - t0) / 1e9)
            return Choice.of(d)
        if not gw.any_up():
            return _NOWHERE  # the router would hold it: none to wait for
        w = gw.waiting.expect(rid, self.connection)
        try:
            d = gw.router.route(toks, request_id=rid, now_ns=t0,
                                boundaries=ends, learn=gw.learn,
                                expected_output_tokens=max_tokens,
                                may_wait=True, sheddable=adm.sheddable,
                                tenant=adm.tenant, deadline_ns=deadline,
                                urgency=adm.urgency, model=model,
                                adapter=adapter)
        except libroute.BusyError:
            gw.waiting.forget(w)
            gw.metrics.on_route_call((now_ns() - t0) / 1e9)
            return Refusal(429, "shed", "the fleet is saturated: a "
                           f"request of priority {adm.priority} is shed")
        except libroute.LimitError:
            gw.waiting.forget(w)
            gw.metrics.on_route_call((now_ns() - t0) / 1e9)
            return Refusal(429, "queue-full", "the waiting queue is full")
        except libroute.StateError:
            gw.waiting.forget(w)
            return _NOWHERE
        except BaseException:
            gw.waiting.forget(w)
            raise
        if d.instance != libroute.INSTANCE_NONE:  # sent at once
            gw.waiting.forget(w)
            gw.metrics.on_route(d, (now_ns() - t0) / 1e9)
            return Choice.of(d)
        gw.metrics.on_route_call((now_ns() - t0) / 1e9)
        e = gw.waiting.wait(w)
        if e is None:
            return _GONE
        if e.status == libroute.Status.OK:
            # routed as route() routes it: a split request carries its
            # prefill leg and goes through both, as a routed one
            c = Choice.of_dispatched(e, gw.router.policy.label)
            gw.metrics.on_dispatched(c.decider, c.reason, e.waited_ns / 1e9)
            return c
        if e.status == libroute.Status.EEXPIRED:
            # backpressure while backends serve (429); none left: 503
            return Refusal(429 if gw.any_up() else 503, "expired",
                           f"no capacity within the TTFT deadline "
                           f"({e.waited_ns / 1e6:.0f} ms waited)")
        return Refusal(503, "dropped", f"dropped from the waiting queue "
                       f"({e.status.name})")

    def _decision_headers(self, b: Backend, d: Choice) -> Dict[str, str]:
        """What was decided, for the client: the backend that answers
        (the decode instance of a split request), why, the deciding
        policy, the predicted hit; of a split request the prefill
        instance, why, and the KV transfer's expected seconds; of one a
        disaggregated rule kept whole, X-Libroute-Prefill-Reason: whole."""
        hdr = {"X-Libroute-Backend": b.name,
               "X-Libroute-Reason": d.reason,
               # The policy that chose: the gateway's, or Lodestar's
               # fallback while it has no model.
               "X-Libroute-Decider": d.decider,
               "X-Libroute-Cached-Tokens": str(d.cached_tokens)}
        if d.prefill is not None:
            hdr["X-Libroute-Prefill-Backend"] = \
                self.gw.backends[d.prefill].name
            hdr["X-Libroute-Transfer-S"] = f"{d.transfer_s:.6f}"
        if d.prefill_reason:
            hdr["X-Libroute-Prefill-Reason"] = d.prefill_reason
        return hdr

    def _prefill_leg(self, rid: int, d: Choice, body: Dict[str, Any],
                     xid: str) -> Union[Tuple[Optional[Dict[str, Any]]],
                                        object]:
        """The prefill leg of split request rid (prefill_body, with
        X-Request-Id xid) on d.prefill. When it answers, the router hears
        prefill_done and the result is (its kv_transfer_params,) (None
        when it answered none). A prefill instance that refuses the
        connection or answers 503 is a refusal, as for a whole request:
        the request fails in the router, the backend is drained and the
        request is routed again (_RETRY). Any other failure (an error
        status or object, no answer in time, an answer that is no JSON
        object) fails the request in the router and answers the client
        with the error (the engine's status and body; 504; 502):
        _ANSWERED. The decode instance never sees a request whose prefill
        failed."""
        gw = self.gw
        pb = gw.backends[d.prefill]
        with gw.lock:
            gw.pd["prefill_legs"] += 1
        conn = http.client.HTTPConnection(pb.host, pb.port,
                                          timeout=gw.timeout_s)
        try:
            conn.request("POST", self.path,
                         json.dumps(prefill_body(body)).encode(),
                         {"Content-Type": "application/json",
                          "X-Request-Id": xid})
            resp = conn.getresponse()
            status, data = resp.status, resp.read()
            ctype = resp.getheader("Content-Type", "application/json")
        except ConnectionError:  # refused or reset: retry elsewhere
            self._refused(rid, pb)
            return _RETRY
        except OSError as e:  # no answer in time
            self._prefill_failed(rid)
            self._answer(504, json.dumps({"error": f"prefill backend "
                                          f"{pb.name}: {e}"}).encode(),
                         "application/json", gw.backends[d.instance], d)
            return _ANSWERED
        finally:
            conn.close()
        pb.last_answer = time.monotonic()
        if status == 503:  # not ready: as a refusal
            self._refused(rid, pb)
            return _RETRY
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if status != 200 or not isinstance(obj, dict) or "error" in obj:
            self._prefill_failed(rid)
            if status == 200:
                status, ctype = 502, "application/json"
                data = json.dumps({"error": f"prefill backend {pb.name}: "
                                   "not an answer"}).encode()
            self._answer(status, data, ctype, gw.backends[d.instance], d)
            return _ANSWERED
        try:
            gw.router.prefill_done(rid, now_ns=now_ns())
        except libroute.LrError:
            pass  # ended meanwhile: nothing to end
        gw.kick()  # the prefill instance has room again
        params = obj.get("kv_transfer_params")
        with gw.lock:
            gw.pd["prefill_done"] += 1
            if not isinstance(params, dict) or not params:
                gw.pd["without_params"] += 1
                params = None
        return (params,)

    def _prefill_failed(self, rid: int) -> None:
        gw = self.gw
        with gw.lock:
            gw.pd["prefill_failures"] += 1
        gw.fail(rid)

    def _answer(self, code: int, data: bytes, ctype: str, b: Backend,
                d: Choice) -> None:
        """A failed request's answer, with the decision's headers."""
        self.gw.metrics.on_response(code)
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in self._decision_headers(b, d).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _refused(self, rid: int, b: Backend) -> None:
        gw = self.gw
        gw.fail(rid)
        gw.mark_down(b)
        with gw.lock:
            gw.retries += 1
        gw.metrics.on_retry()

    def _relay(self, rid: int, b: Backend, d: Choice,
               conn: http.client.HTTPConnection,
               resp: http.client.HTTPResponse, stream: bool,
               routed_ns: int, routed_tokens: int) -> None:
        """Pass the engine's answer through, telling the router: the first
        token (the first data event of a stream, a whole answer's
        arrival), then the end (a stream's [DONE], or llama.cpp's native
        `"stop": true` event; a whole answer) or a failure (an error
        status, an error event, a stream cut short)."""
        gw = self.gw
        gw.metrics.on_response(resp.status)
        a = _Answer(gw, rid, b, d, routed_ns, routed_tokens)
        hdr = self._decision_headers(b, d)
        try:
            if not stream or resp.status != 200:
                data = resp.read()
                b.last_answer = time.monotonic()
                a.whole(resp.status, data)
                # The engine has answered in full: the request ends here,
                # before the client can see the answer (and, say, read the
                # gateway's /status) and whether or not it reads it.
                self.send_response(resp.status)
                self.send_header("Content-Type",
                                 resp.getheader("Content-Type",
                                                "application/json"))
                self.send_header("Content-Length", str(len(data)))
                for k, v in hdr.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                for k, v in hdr.items():
                    self.send_header(k, v)
                self.end_headers()
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    b.last_answer = time.monotonic()
                    if line.startswith(b"data: "):
                        a.event(line[6:])
                    self.wfile.write(line)
                    self.wfile.flush()
                a.eof()
        except OSError:
            # the backend or the client went away mid-answer
            a.cut()
        finally:
            conn.close()


class _Answer:
    """One answer as it passes, and what the router hears of it (exactly
    one end: complete or fail)."""

    def __init__(self, gw: Gateway, rid: int, b: Backend,
                 d: Choice, routed_ns: int,
                 routed_tokens: int) -> None:
        self.gw, self.rid, self.b, self.d = gw, rid, b, d
        self.routed_ns = routed_ns
        self.routed_tokens = routed_tokens
        self.first = False
        self.ended = False
        self.done = False    # the engine said it finished
        self.error = False   # the engine said it failed
        self.out = 0         # output tokens: events counted
        self.out_told: Optional[int] = None  # or the engine's count
        self.cached: Optional[int] = None

    def first_token(self) -> None:
        if self.first:
            return
        self.first = True
        t = now_ns()
        self.gw.router.first_token(self.rid, now_ns=t)
        self.gw.metrics.on_first_token((t - self.routed_ns) / 1e9)
        self.gw.kick()

    def _take(self, obj: Any) -> None:
        c = observed_cached(obj)
        if c is not None and self.cached is None:
            c = in_router_tokens(c, engine_prompt_tokens(obj),
                                 self.routed_tokens)
            self.cached = c
            self.gw.on_observed(self.rid, self.b, self.d, c)
        n = output_tokens(obj)
        if n is not None:
            self.out_told = n

    def whole(self, status: int, data: bytes) -> None:
        """A whole answer: an error status or an error object is a
        failure; otherwise the first token and the end at once."""
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if status != 200 or (isinstance(obj, dict) and "error" in obj):
            self.fail()
            return
        self.first_token()
        self._take(obj)
        self.complete()

    def event(self, payload: bytes) -> None:
        """One SSE data event of a stream."""
        if payload.startswith(b"[DONE]"):
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "error" in obj:
            self.error = True  # llama.cpp's error inside a stream
            return
        if self.error:
            return
        self.first_token()
        if isinstance(obj, dict):
            if obj.get("choices") or "content" in obj and \
                    obj.get("stop") is False:
                self.out += 1
            if obj.get("stop") is True:  # llama.cpp's native end
                self.done = True
            self._take(obj)

    def eof(self) -> None:
        if self.done and not self.error:
            self.complete()
        else:
            self.fail()

    def cut(self) -> None:
        self.fail()

    def complete(self) -> None:
        if self.ended:
            return
        self.ended = True
        n = self.out_told if self.out_told is not None else self.out
        self.gw.router.complete(self.rid, n, now_ns=now_ns())
        self.gw.kick()

    def fail(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.gw.fail(self.rid)


class GatewayServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # bursts of clients: the default 5 resets them

    def __init__(self, addr: Tuple[str, int], gateway: Gateway) -> None:
        super().__init__(addr, Handler)
        self.gateway = gateway


def add_fleet_args(ap: argparse.ArgumentParser) -> None:
    """The replica options (fleet.py, docs/scale.md)."""
    g = ap.add_argument_group("replicas")
    g.add_argument("--name", default="gateway",
                   help="this gateway's name (its snapshot's key)")
    g.add_argument("--redis", metavar="HOST:PORT",
                   help="share placements and load with the other gateways "
                        "over Redis pub/sub; snapshots in Redis")
    g.add_argument("--fleet", default="default",
                   help="the fleet: its gateways share one Redis channel")
    g.add_argument("--kv-events", action="store_true",
                   help="apply the engines' vLLM KV events (ZeroMQ)")
    g.add_argument("--kv-endpoint", action="append", default=[],
                   metavar="NAME=PUB,REPLAY",
                   help="an engine's ZMQ event and replay endpoints")
    g.add_argument("--sync-ms", type=float, default=50.0,
                   help="delta publication period (default 50)")
    g.add_argument("--gauge-ms", type=float, default=200.0,
                   help="load gauge publication period (default 200; 0: "
                        "none, for AIBrix's rule behind replicas with a "
                        "waiting queue, docs/scale.md)")
    g.add_argument("--snapshot-s", type=float, default=2.0,
                   help="snapshot period (default 2)")


def add_engine_args(ap: argparse.ArgumentParser) -> None:
    """How the gateway talks to its engines."""
    g = ap.add_argument_group("engines")
    g.add_argument("--tokenize", action="store_true",
                   help="tokenize text prompts with a backend's /tokenize "
                        "(llama.cpp's), so the router sees the model's "
                        "tokens")
    g.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="longest wait for an engine's answer to start "
                        "(llama.cpp streams only from the first token; "
                        "default 30)")
    g.add_argument("--dead-after", type=float, default=5.0, metavar="S",
                   help="drain a backend whose /health has not answered "
                        "for S seconds (default 5; a refused connection "
                        "drains at once)")


def engine_kwargs(a: argparse.Namespace) -> Dict[str, Any]:
    return {"engine_tokenizer": a.tokenize, "timeout_s": a.timeout,
            "dead_after_s": a.dead_after,
            "adapters": getattr(a, "adapters", None)}


def add_queue_args(ap: argparse.ArgumentParser) -> None:
    """The waiting queue (waiting.py, README "Waiting")."""
    g = ap.add_argument_group("waiting queue")
    g.add_argument("--no-queue", action="store_true",
                   help="route every request at once, even to a saturated "
                        "fleet (no waiting, no shedding; the priority, "
                        "tenant and SLO headers are ignored)")
    g.add_argument("--saturation-queue", type=int, default=None, metavar="N",
                   help="an instance is saturated with N requests before "
                        "their first token, or N waiting in its scrape "
                        "(library default 8)")
    g.add_argument("--saturation-kv", type=float, default=None, metavar="F",
                   help="... or its scrape's KV-cache use at F (0.01..1; "
                        "library default 0.8)")
    g.add_argument("--queue-capacity", type=int, default=None, metavar="N",
                   help="requests waiting at once; more get 429 (library "
                        "default 4096)")
    g.add_argument("--ttft-slo", action="append", default=[],
                   metavar="[URGENCY=]MS",
                   help="deadline of the requests of that urgency (0..7; "
                        "without it: every urgency) that carry no "
                        "x-slo-ttft-ms header; past it a waiting request "
                        "gets 429 (default: --timeout)")
    g.add_argument("--objective", action="append", default=[],
                   metavar="NAME=PRIORITY",
                   help="the priority of requests whose "
                        "x-gateway-inference-objective is NAME (as an "
                        "InferenceObjective's; unknown names: 0)")
    g.add_argument("--dispatch-ms", type=float, default=100.0, metavar="MS",
                   help="dispatch timer while requests wait (default 100)")


def queue_kwargs(ap: argparse.ArgumentParser,
                 a: argparse.Namespace) -> Dict[str, Any]:
    try:
        slo = parse_slo(a.ttft_slo)
        objectives = parse_objectives(a.objective)
    except ValueError as e:
        ap.error(str(e))
    return {"queue": not a.no_queue, "saturation_queue": a.saturation_queue,
            "saturation_kv": a.saturation_kv,
            "queue_capacity": a.queue_capacity, "ttft_slo_s": slo,
            "objectives": objectives, "dispatch_s": a.dispatch_ms / 1e3}


def start_fleet(a: argparse.Namespace, backends: List[Tuple[Any, ...]],
                policy: str,
                queue: Optional[Dict[str, Any]] = None
                ) -> Tuple[Gateway, List[Any]]:
    """The gateway with its replica wiring: Redis sync and KV events."""
    import fleet
    sync = None
    opts: Dict[str, Any] = {"replica_id": fleet.new_replica_id()}
    if a.redis:
        host, _, port = a.redis.rpartition(":")
        opts["index_eviction"] = libroute.Eviction.LRU
        sync = fleet.RedisSync(None, host or "127.0.0.1", int(port),
                               fleet=a.fleet, name=a.name,
                               backends=[b[0] for b in backends],
                               sync_s=a.sync_ms / 1e3,
                               gauge_s=a.gauge_ms / 1e3,
                               snapshot_s=a.snapshot_s)

    def prepare(router: Router) -> bool:
        if sync is None:
            return False
        sync.router = router
        return sync.restore()

    if a.index_capacity_blocks is not None:
        opts["index_capacity_blocks"] = a.index_capacity_blocks
    # with events alone the engines' events are the truth; with deltas
    # too, routes learn (what peers hear of) and the events correct them
    gw = Gateway(backends, policy=policy, router_options=opts,
                 prepare=prepare, learn=not a.kv_events or sync is not None,
                 learn_every=a.learn_every, **engine_kwargs(a),
                 **(queue or {}))
    stoppers: List[Any] = []
    if sync is not None:
        sync.start()
        gw.status_parts["redis"] = sync.status
        gw.metrics.enable_deltas()
        stoppers.append(sync.close)
    if a.kv_events:
        eps = fleet.kv_endpoints(a.kv_endpoint)
        missing = [b.name for b in gw.backends.values() if b.name not in eps]
        if missing:
            raise SystemExit(f"--kv-events: no --kv-endpoint for {missing}")
        sub = fleet.KvEventSubscriber(
            gw.router, {b.id: eps[b.name] for b in gw.backends.values()})
        gw.status_parts["kv"] = sub.status
        gw.metrics.enable_kv_events(lambda: sub.counts["replays"])
        gw.on_backend_up.append(lambda b: gw.router.kv_reset(b.id))
        stoppers.append(sub.close)
    return gw, stoppers


_PLACEMENT = ("node", "rack", "region")
_PLACEMENT_MAX = 2**32 - 1  # lr_instance_spec's uint32_t


def parse_backend(spec: str, models: str = "", max_loras: int = 0,
                  role: str = "both"
                  ) -> Tuple[str, str, int, Tuple[str, ...], int, str,
                             int, int, int]:
    """--backend NAME=HOST:PORT[,models=A+B][,max_loras=N][,role=R]
    [,node=N][,rack=N][,region=N] as (name, host, port, models,
    max_loras, role, node, rack, region); `models` (comma-separated),
    `max_loras` and `role` are the defaults the options override. A
    role is both, prefill or decode; a placement is a number the host
    gives (0: unknown)."""
    addr, *opts = spec.split(",")
    m = re.fullmatch(r"([^=]+)=([^:]+):(\d+)", addr)
    if not m:
        raise ValueError("expected NAME=HOST:PORT[,models=A+B]"
                         "[,max_loras=N][,role=R][,node=N][,rack=N]"
                         "[,region=N]")
    names = tuple(n for n in models.split(",") if n)
    role = role_name(role)
    place = dict.fromkeys(_PLACEMENT, 0)
    for o in opts:
        key, eq, value = o.partition("=")
        if key == "models" and eq:
            names = tuple(n for n in value.split("+") if n)
        elif key in ("max_loras",) + _PLACEMENT and eq:
            try:
                n = int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r}: not a number"
                                 ) from None
            if key == "max_loras":
                max_loras = n
            elif not 0 <= n <= _PLACEMENT_MAX:
                raise ValueError(f"{key} must be in 0..{_PLACEMENT_MAX}")
            else:
                place[key] = n
        elif key == "role" and eq:
            role = role_name(value)
        else:
            raise ValueError(f"{o!r}: expected models=A+B, max_loras=N, "
                             "role=both|prefill|decode, node=N, rack=N "
                             "or region=N")
    if max_loras < 0:
        raise ValueError("max_loras must be >= 0")
    return (m.group(1), m.group(2), int(m.group(3)), names, max_loras,
            role, place["node"], place["rack"], place["region"])


def main() -> None:
    ap = argparse.ArgumentParser(
        description="OpenAI-style gateway routing with libroute.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--policy", default="prefix-cache",
                    help="a libroute policy name (default prefix-cache)")
    ap.add_argument("--backend", action="append", required=True,
                    metavar="NAME=HOST:PORT[,models=A+B][,max_loras=N]"
                            "[,role=R][,node=N][,rack=N][,region=N]",
                    help="an engine; after its address, the model names "
                         "it serves, its LoRA adapter slots and its role "
                         "(override --models, --max-loras and --role), "
                         "and where it runs (node, rack, region: numbers "
                         "of your own, 0 unknown; they price the KV "
                         "transfer of a split request)")
    ap.add_argument("--models", default="", metavar="A,B",
                    help="the model names every backend serves (vLLM's "
                         "served model names); a request's model that is "
                         "none of the fleet's is a LoRA adapter (default: "
                         "none, every request routes whatever its model)")
    ap.add_argument("--max-loras", type=int, default=0, metavar="N",
                    help="every backend's LoRA adapter slots (vLLM's "
                         "--max-loras; default 0: not declared, a scrape "
                         "of vllm:lora_requests_info tells)")
    ap.add_argument("--role", default="both",
                    choices=("both", "prefill", "decode"),
                    help="every backend's part in a disaggregated fleet "
                         "(default both); with prefill backends, a "
                         "disaggregated policy (llm-d-pd, dynamo-pd, ...) "
                         "splits a request into a prefill leg and a "
                         "decode leg (README, \"Disaggregated prefill and "
                         "decode\")")
    ap.add_argument("--adapter", action="append", default=[],
                    metavar="NAME=BASE",
                    help="LoRA adapter NAME is of base model BASE (one of "
                         "the fleet's): its requests go only to the "
                         "backends serving BASE; over what the engines' "
                         "GET /v1/models lists (repeat)")
    add_fleet_args(ap)
    ap.add_argument("--index-capacity-blocks", type=int, default=None,
                    help="prefix index capacity in blocks (library default)")
    ap.add_argument("--learn-every", type=int, default=None, metavar="N",
                    help="lodestar: train after N samples and every N more")
    add_engine_args(ap)
    add_queue_args(ap)
    a = ap.parse_args()
    queue = queue_kwargs(ap, a)
    if not a.gauge_ms >= 0:  # NaN too
        ap.error(f"--gauge-ms {a.gauge_ms}: a period in ms, 0 for none")
    try:
        a.adapters = parse_adapters(a.adapter)
    except ValueError as e:
        ap.error(f"--adapter {e}")
    backends = []
    for spec in a.backend:
        try:
            backends.append(parse_backend(spec, a.models, a.max_loras,
                                          a.role))
        except ValueError as e:
            ap.error(f"--backend {spec!r}: {e}")
    if all(spec[5] == "prefill" for spec in backends):
        ap.error("--backend: every backend is a prefill backend; at least "
                 "one must decode (role both or decode)")
    bases = {m for spec in backends for m in spec[3]}
    for name, base in a.adapters.items():
        if base not in bases or name in bases:
            ap.error(f"--adapter {name}={base}: BASE must be one of the "
                     "fleet's base models (--models, models=), NAME none")
    stoppers: List[Any] = []
    if a.redis or a.kv_events:
        gw, stoppers = start_fleet(a, backends, a.policy, queue)
    else:
        gw = Gateway(backends, policy=a.policy,
                     index_capacity_blocks=a.index_capacity_blocks,
                     learn_every=a.learn_every, **engine_kwargs(a), **queue)
    srv = GatewayServer((a.host, a.port), gw)
    print(f"gateway on http://{a.host}:{srv.server_address[1]} ({a.policy}), "
          f"{len(backends)} backends", flush=True)
    print("READY " + json.dumps({"http": srv.server_address[1],
                                 "restored": gw.restored}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        for stop in stoppers:
            stop()
        gw.close()


if __name__ == "__main__":
    main()
