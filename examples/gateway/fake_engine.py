"""A fake LLM engine for the gateway example and its end-to-end test.

It speaks just enough of the OpenAI HTTP API (POST /v1/completions and
/v1/chat/completions, streamed or not), serves vLLM-named Prometheus
metrics on GET /metrics and answers GET /health. What makes it useful for
routing is its prefix cache: the prompt text is cut into 64-byte blocks
whose hashes chain, an LRU keeps the last `cache_blocks` of them, and the
time to first token is `base_s + per_block_s` for every block that was
not cached, so a gateway that keeps a conversation on one engine is
measurably faster. Prompts are serialised exactly as the gateway does
(see prompt_text), so both sides agree on what a prefix is.

For tests of a saturated fleet it can hold requests before their first
token (POST /admin/hold, then /admin/release N at a time) and lists the
requests' OpenAI `user` fields in the order they arrived (GET
/admin/state), so a test controls when capacity frees and sees the order
in which the gateway let requests through.

    python3 fake_engine.py --port 8101 --name e1

It can serve models and LoRA adapters as vLLM does (--models,
--max-loras, --lora-modules): a request's `model` is one of its served
model names, or an adapter, served under its own name and loaded first
when not resident (lora_load_s more to the first token; an LRU keeps
`max_loras` of them, as vLLM's --max-loras slots); an adapter's prompts
cache apart from the base model's (with --kv-events, its stores carry
the adapter's lora_name and extra keys, as vLLM's do). Any other name
gets vLLM's 404. Its
/metrics then carries vLLM's `vllm:lora_requests_info` gauge: the
adapters of its requests in flight (running; held ones waiting) and
max_lora. An engine given none of these takes any `model`.

It plays either part of vLLM's disaggregated serving (the
NixlConnector's protocol), whatever it was started as: a request whose
`kv_transfer_params` has `do_remote_decode` true is a prefill leg (its
prompt computed, one token answered, and `kv_transfer_params` with
`do_remote_prefill` true, `remote_engine_id`, `remote_block_ids`,
`remote_host`, `remote_port`, `remote_request_id` (the X-Request-Id) and
`tp_size` 1 returned; the blocks are held until a decode engine reads
them, or for kv_hold_s); one whose params have `do_remote_prefill` true
is a decode leg: it reads the blocks it does not cache from the prefill
engine (POST /kv/pull at remote_host:remote_port, this fake's side
channel, which frees them), skips their prefill (transfer_block_s each
instead of per_block_s), caches them, and decodes. A failed read is
recomputed. `usage` says `kv_leg` (whole, prefill, decode) and
`computed_blocks` / `received_blocks` beside `cached_blocks`;
`cached_tokens` counts the received ones too, as vLLM's does. GET
/admin/state has `legs`, `blocks` (computed, cached, received, sent),
`kv_held`, `pulls` and each request's `kv_transfer_params` and
X-Request-Id (`requests`; a prefill's with the params it `returned`), and
/metrics `fake:prompt_blocks_total{source=...}`,
`fake:kv_blocks_held` and `fake:requests_total{kind=...}`. POST
/admin/fail_next {"n": N, "status": S} fails the next N completions
with status S (500) before any token.

GET /v1/models answers as vLLM's: its served model names (`parent`
null), then each adapter it lists with its base model (its first served
name) as `parent`: those of --lora-modules, those loaded at runtime (POST
/v1/load_lora_adapter {"lora_name": ..., "lora_path": ...}, as vLLM's
dynamic loading; /v1/unload_lora_adapter {"lora_name": ...} drops one),
and, without --lora-modules, each adapter once it has served it (as
vLLM's resolvers add theirs). --hide-adapters lists the base models only,
as an engine that lists no adapters.

    python3 fake_engine.py --port 8101 --name e1 --models llama \
        --max-loras 2 --lora-modules sql,chat

With --kv-events it also publishes vLLM KV-cache events over ZeroMQ, as
vLLM does with `--kv-events-config` (see KvEngine): its cache is then one
of 16-token blocks of the prompt's tokens as the gateway computes them
(libroute's text_tokens, each message on its own), every block stored or
evicted is a BlockStored / BlockRemoved event, and every batch goes out on
a PUB socket as [topic, sequence number (8 bytes big endian), msgpack
payload] and stays in a replay buffer served on a ROUTER socket.

    python3 fake_engine.py --port 8101 --name e1 --kv-events

With --llamacpp it speaks llama.cpp's llama-server API instead (see
LlamaEngine): token-id prompts, slots with a per-slot prompt cache,
`timings.cache_n`, /tokenize, /apply-template, /slots, and `llamacpp:`
metrics (501 with --no-metrics).

    python3 fake_engine.py --port 8101 --name e1 --llamacpp --slots 2
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import http.server
import json
import re
import struct
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

BLOCK = 64


def prompt_text(body: Dict[str, Any]) -> Tuple[List[str], str]:
    """The prompt as a list of message texts (one for a completion), and
    their concatenation. The gateway tokenizes the same pieces."""
    if "messages" in body:
        parts = []
        for m in body["messages"]:
            if not isinstance(m, dict):
                raise ValueError("messages: each must be an object")
            parts.append(f"<|{m.get('role', 'user')}|>{m.get('content', '')}")
        return parts, "".join(parts)
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise ValueError("prompt: expected a string")
    return [prompt], prompt


class Engine:
    """The state one fake engine shares between its request threads."""

    ARRIVALS = 1000  # arrivals kept for GET /admin/state

    def __init__(self, name: str, *, cache_blocks: int = 4096,
                 base_s: float = 0.01, per_block_s: float = 0.002,
                 per_token_s: float = 0.002,
                 models: Tuple[str, ...] = (), max_loras: int = 0,
                 loras: Optional[Tuple[str, ...]] = None,
                 lora_load_s: float = 0.02,
                 hide_adapters: bool = False,
                 transfer_block_s: float = 0.0002) -> None:
        self.name = name
        # a decode leg's wait for each block it reads from a prefill
        # engine (instead of per_block_s to compute it)
        self.transfer_block_s = transfer_block_s
        # Models and adapters (see the module doc): its served model
        # names, adapter slots and known adapters (None: any name), the
        # resident adapters (LRU, most recent last) and the in-flight
        # requests of each, running and held.
        self.models, self.max_loras = tuple(models), max_loras
        self.loras = None if loras is None else tuple(loras)
        self.lora_load_s = lora_load_s
        self.resident: "collections.OrderedDict[str, None]" = \
            collections.OrderedDict()
        self.lora_running: Dict[str, int] = {}
        self.lora_held: Dict[str, int] = {}
        self.lora_loads = 0
        # The adapters GET /v1/models lists (--lora-modules, loaded at
        # runtime, or served), in the order they came; hide_adapters:
        # it lists none.
        self.listed: Dict[str, None] = dict.fromkeys(loras or ())
        self.hide_adapters = hide_adapters
        self.created = int(time.time())
        self.cache_blocks = cache_blocks
        self.base_s = base_s
        self.per_block_s = per_block_s
        self.per_token_s = per_token_s
        self.lock = threading.Lock()
        self.cache: "collections.OrderedDict[bytes, None]" = \
            collections.OrderedDict()
        self.running = 0
        self.served = 0
        # Test hooks (POST /admin/hold, /admin/release, GET /admin/state):
        # while `hold` is on, a request waits before its first token until
        # a permit is released for it; `arrivals` are the requests' "user"
        # fields in the order they arrived (the last ARRIVALS).
        self.gate = threading.Condition(self.lock)
        self.hold = False
        self.permits = 0
        self.held = 0
        self.arrivals: List[str] = []
        # Disaggregated prefill and decode (vLLM's NixlConnector, in
        # small; see Engine.pd_* and the module doc): its engine id, the
        # blocks each prefill leg keeps until a decode engine pulls them
        # ({request id: (block ids, time held)}), the requests it served
        # by kind, its prompt blocks by where they came from, and what
        # each request carried (the last ARRIVALS).
        self.engine_id = f"fake-{name}"
        self.kv_hold_s = 480.0  # vLLM frees unpulled blocks after a while
        self.kv_held: "collections.OrderedDict[str, Tuple[List[int], float]]" \
            = collections.OrderedDict()
        self.next_block_id = 0
        self.legs = {"whole": 0, "prefill": 0, "decode": 0}
        self.blocks = {"computed": 0, "cached": 0, "received": 0,
                       "sent": 0}
        self.pulls = self.pull_failures = 0
        self.requests: List[Dict[str, Any]] = []
        # POST /admin/fail_next {"n": N, "status": S}: the next N
        # completions answer status S (500) before any token.
        self.fail_next = 0
        self.fail_status = 500

    def arrive(self, tag: str, record: Optional[Dict[str, Any]] = None
               ) -> None:
        with self.lock:
            self.arrivals.append(tag)
            del self.arrivals[:-self.ARRIVALS]
            if record is not None:
                self.requests.append(record)
                del self.requests[:-self.ARRIVALS]

    def take_failure(self) -> Optional[int]:
        """The status to fail this request with, if one is due."""
        with self.lock:
            if self.fail_next <= 0:
                return None
            self.fail_next -= 1
            return self.fail_status

    # ---- disaggregated prefill and decode -----------------------------

    def pd_hold(self, request_id: str, blocks: int) -> List[int]:
        """A prefill leg's blocks, kept for the decode engine to pull:
        their ids (the engine's own numbering). Holds older than
        kv_hold_s are freed first, as vLLM frees blocks no decode engine
        read."""
        with self.lock:
            now = time.monotonic()
            while self.kv_held:
                rid, (_, t) = next(iter(self.kv_held.items()))
                if now - t <= self.kv_hold_s:
                    break
                del self.kv_held[rid]
            ids = list(range(self.next_block_id, self.next_block_id + blocks))
            self.next_block_id += blocks
            self.kv_held[request_id] = (ids, now)
            self.kv_held.move_to_end(request_id)
            return ids

    def pd_release(self, request_id: str, block_ids: Any) -> Optional[int]:
        """A decode engine reads `block_ids` of a held prefill: the number
        it read (those of the hold's ids it named), and the hold is freed;
        None when no such hold is kept (never made, pulled, or expired)."""
        with self.lock:
            got = self.kv_held.pop(request_id, None)
            if got is None:
                return None
            held = set(got[0])
            n = sum(1 for b in block_ids or () if b in held)
            self.pulls += 1
            self.blocks["sent"] += n
            return n

    def pd_count(self, kind: str, computed: int, cached: int,
                 received: int) -> None:
        with self.lock:
            self.legs[kind] += 1
            self.blocks["computed"] += computed
            self.blocks["cached"] += cached
            self.blocks["received"] += received

    def pd_state(self) -> Dict[str, Any]:
        """(caller holds the lock)"""
        return {"engine_id": self.engine_id, "legs": dict(self.legs),
                "blocks": dict(self.blocks),
                "kv_held": {r: len(ids) for r, (ids, _) in
                            self.kv_held.items()},
                "pulls": self.pulls, "pull_failures": self.pull_failures,
                "requests": list(self.requests)}

    def pd_metrics(self) -> str:
        """Its prompt blocks by source and the blocks it holds for decode
        engines, under names of its own (no engine's; the gateway reads
        none of them) (caller holds the lock)."""
        return "".join(
            f'fake:prompt_blocks_total{{source="{k}"}} {v}\n'
            for k, v in self.blocks.items()) + (
            f"fake:kv_blocks_held "
            f"{sum(len(ids) for ids, _ in self.kv_held.values())}\n"
            f"fake:requests_total{{kind=\"whole\"}} {self.legs['whole']}\n"
            f"fake:requests_total{{kind=\"prefill\"}} "
            f"{self.legs['prefill']}\n"
            f"fake:requests_total{{kind=\"decode\"}} "
            f"{self.legs['decode']}\n")

    def set_hold(self, on: bool) -> None:
        with self.lock:
            self.hold = on
            self.gate.notify_all()

    def release(self, n: int) -> None:
        """Let n held requests (or the next n to arrive) go on."""
        with self.lock:
            self.permits += n
            self.gate.notify_all()

    def wait_gate(self) -> None:
        """Before the first token: wait while held (at most a minute, so
        that a test that fails never leaves a thread behind for good)."""
        with self.lock:
            if not self.hold:
                return
            self.held += 1
            self.gate.wait_for(lambda: not self.hold or self.permits > 0,
                               timeout=60)
            if self.permits > 0:
                self.permits -= 1
            self.held -= 1

    def state(self) -> Dict[str, Any]:
        with self.lock:
            return {"arrivals": list(self.arrivals), "held": self.held,
                    "running": self.running, "hold": self.hold,
                    "permits": self.permits,
                    "adapters": list(self.resident),
                    "lora_loads": self.lora_loads, **self.pd_state()}

    def adapter_of(self, body: Dict[str, Any]) -> Optional[str]:
        """The LoRA adapter a request names, None for the base model;
        KeyError for a model it does not serve (vLLM's 404). An engine
        with no served names and no adapter slots takes any model."""
        name = body.get("model")
        if not self.models and not self.max_loras:
            return None
        if name in (None, "") or name in self.models:
            return None
        if self.max_loras and isinstance(name, str) and \
                (self.loras is None or name in self.loras):
            return name
        raise KeyError(name)

    def model_list(self) -> Dict[str, Any]:
        """GET /v1/models as vLLM answers it: a card per served name
        (parent null), then one per listed adapter, its parent the first
        served name (vLLM's base_model_paths[0])."""
        bases = self.models or (self.name,)

        def card(name: str, root: str, parent: Optional[str]
                 ) -> Dict[str, Any]:
            return {"id": name, "object": "model", "created": self.created,
                    "owned_by": "vllm", "root": root, "parent": parent,
                    "max_model_len": 4096, "permission": []}
        with self.lock:
            adapters = [] if self.hide_adapters else list(self.listed)
        return {"object": "list",
                "data": [card(m, m, None) for m in bases]
                + [card(a, f"/adapters/{a}", bases[0]) for a in adapters]}

    def load_adapter(self, name: str) -> bool:
        """vLLM's /v1/load_lora_adapter: the adapter is known (served and
        listed) from now on; False when it already was."""
        with self.lock:
            if name in self.listed:
                return False
            self.listed[name] = None
            if self.loras is not None:
                self.loras += (name,)
            return True

    def unload_adapter(self, name: str) -> bool:
        """vLLM's /v1/unload_lora_adapter: forgotten (no longer listed,
        served or resident); False when it was not loaded."""
        with self.lock:
            if name not in self.listed:
                return False
            del self.listed[name]
            if self.loras is not None:
                self.loras = tuple(a for a in self.loras if a != name)
            self.resident.pop(name, None)
            return True

    def lora_begin(self, adapter: str) -> bool:
        """A request of `adapter` arrives: make it resident (the least
        recently used adapter leaves when every slot is taken, preferring
        one without requests); True when it had to be loaded."""
        with self.lock:
            loaded = adapter not in self.resident
            if loaded:
                self.lora_loads += 1
                while len(self.resident) >= self.max_loras:
                    idle = [a for a in self.resident
                            if not self.lora_running.get(a)
                            and not self.lora_held.get(a)]
                    del self.resident[idle[0] if idle
                                      else next(iter(self.resident))]
            self.resident[adapter] = None
            self.resident.move_to_end(adapter)
            self.listed.setdefault(adapter, None)
            self.lora_held[adapter] = self.lora_held.get(adapter, 0) + 1
            return loaded

    def lora_step(self, adapter: str, running: bool) -> None:
        """The adapter's request goes from held to running (running
        True), or ends (False: from running)."""
        with self.lock:
            if running:
                self.lora_held[adapter] -= 1
                self.lora_running[adapter] = \
                    self.lora_running.get(adapter, 0) + 1
            else:
                self.lora_running[adapter] -= 1

    def lora_drop(self, adapter: str) -> None:
        """The adapter's request ends before it ran."""
        with self.lock:
            self.lora_held[adapter] -= 1

    def lora_metrics(self) -> str:
        """vLLM's lora_requests_info: the adapters of its running and
        waiting (held) requests, its slots; valued with the time, as
        vLLM's gauge is (caller holds the lock)."""
        if not self.max_loras:
            return ""
        run = ",".join(a for a, n in self.lora_running.items() if n > 0)
        wait = ",".join(a for a, n in self.lora_held.items() if n > 0)
        return (f'vllm:lora_requests_info{{max_lora="{self.max_loras}",'
                f'running_lora_adapters="{run}",'
                f'waiting_lora_adapters="{wait}"}} {time.time():.3f}\n')

    def admit(self, text: str, salt: str = "") -> Tuple[int, int]:
        """Look the prompt up in the cache and insert it: (cached blocks,
        all blocks). Hits count only for leading blocks. `salt` (an
        adapter's name) keys the prompt's blocks apart."""
        data = text.encode("utf-8")
        keys = []
        h = salt.encode("utf-8")
        for off in range(0, len(data), BLOCK):
            h = hashlib.blake2b(h + data[off:off + BLOCK],
                                digest_size=16).digest()
            keys.append(h)
        with self.lock:
            cached = 0
            while cached < len(keys) and keys[cached] in self.cache:
                cached += 1
            for k in keys:
                self.cache[k] = None
                self.cache.move_to_end(k)
            while len(self.cache) > self.cache_blocks:
                self.cache.popitem(last=False)
            self.running += 1
            self.served += 1
        return cached, len(keys)

    def done(self) -> None:
        with self.lock:
            self.running -= 1


# ---- KV-cache events (vLLM's format) -----------------------------------------

KV_BLOCK = 16          # tokens per KV block, as the gateway's router
REPLAY_KEEP = 10000    # batches vLLM keeps for replay
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def prompt_tokens(body: Dict[str, Any]) -> List[int]:
    """The prompt's tokens exactly as the gateway computes them: the
    messages joined, cut once (gateway.py's Gateway.tokenize)."""
    from libroute import text_tokens  # the binding, on PYTHONPATH
    _, text = prompt_text(body)
    return list(text_tokens(text))


class KvPublisher:
    """vLLM's ZmqEventPublisher, in small: events are queued, a thread
    sends them as numbered batches on a PUB socket every few ms, keeps the
    last REPLAY_KEEP batches and answers replay requests on a ROUTER
    socket ([identity, b"", start sequence] -> every kept batch from there,
    then the end marker -1). Batches alternate between the two encodings
    vLLM has used: positional events, and events as maps tagged by type."""

    def __init__(self, host: str = "127.0.0.1", topic: bytes = b"kv",
                 period_s: float = 0.005) -> None:
        import zmq  # Debian python3-zmq
        import msgpack  # Debian python3-msgpack
        self.zmq, self.msgpack = zmq, msgpack
        self.ctx = zmq.Context.instance()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 100000)
        self.pub.bind(f"tcp://{host}:*")
        self.replay = self.ctx.socket(zmq.ROUTER)
        self.replay.setsockopt(zmq.LINGER, 0)
        self.replay.bind(f"tcp://{host}:*")
        self.pub_endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.replay_endpoint = self.replay.getsockopt_string(zmq.LAST_ENDPOINT)
        self.topic, self.period_s = topic, period_s
        self.lock = threading.Lock()
        self.pending: List[Any] = []
        self.buffer: "collections.deque" = collections.deque(
            maxlen=REPLAY_KEEP)
        self.seq = 0
        self.drop_next = 0
        self.sent = self.dropped = self.replays = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stored(self, hashes: List[int], parent: Optional[int],
               tokens: List[int], lora: Optional[str] = None) -> None:
        with self.lock:
            self.pending.append(("BlockStored", hashes, parent, tokens, lora))

    def removed(self, hashes: List[int]) -> None:
        with self.lock:
            self.pending.append(("BlockRemoved", hashes))

    def cleared(self) -> None:
        with self.lock:
            self.pending.append(("AllBlocksCleared",))

    def _event(self, ev: Any, as_map: bool) -> Any:
        if ev[0] == "BlockStored":
            _, hashes, parent, tokens, lora = ev
            # an adapter's blocks: its name, and in each block's extra
            # keys, as vLLM's generate_block_hash_extra_keys puts it
            extra = [[lora] for _ in hashes] if lora is not None else None
            if as_map:  # vLLM >= 0.12: msgspec structs as maps
                return {"type": "BlockStored", "block_hashes": hashes,
                        "parent_block_hash": parent, "token_ids": tokens,
                        "block_size": KV_BLOCK, "lora_id": None,
                        "medium": "GPU", "lora_name": lora,
                        "extra_keys": extra, "group_idx": 0,
                        "kv_cache_spec_kind": "full_attention"}
            return ["BlockStored", hashes, parent, tokens, KV_BLOCK, None,
                    "GPU", lora, extra, 0]
        if ev[0] == "BlockRemoved":
            if as_map:
                return {"type": "BlockRemoved", "block_hashes": ev[1],
                        "medium": "GPU"}
            return ["BlockRemoved", ev[1], "GPU"]
        return {"type": "AllBlocksCleared"} if as_map else ["AllBlocksCleared"]

    def _flush(self) -> None:
        with self.lock:
            events, self.pending = self.pending, []
            if not events:
                return
            seq = self.seq
            self.seq += 1
            drop = self.drop_next > 0
            if drop:
                self.drop_next -= 1
        as_map = seq % 2 == 1
        batch = [time.time(), [self._event(e, as_map) for e in events], 0]
        payload = self.msgpack.packb(batch, use_bin_type=True)
        self.buffer.append((seq, payload))
        if drop:  # lost on the wire: only a replay brings it
            self.dropped += 1
            return
        self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        self.sent += 1

    def _serve_replay(self) -> None:
        frames = self.replay.recv_multipart()
        if len(frames) != 3:
            return
        ident, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self.buffer):
            if seq >= first:
                self.replay.send_multipart([ident, b"", seq.to_bytes(8, "big"),
                                            payload])
        self.replay.send_multipart([ident, b"", END_SEQ, b""])
        self.replays += 1

    def _run(self) -> None:
        poller = self.zmq.Poller()
        poller.register(self.replay, self.zmq.POLLIN)
        while not self.stop.is_set():
            if dict(poller.poll(self.period_s * 1000)).get(self.replay):
                self._serve_replay()
            self._flush()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.pub.close()
        self.replay.close()


class KvEngine(Engine):
    """An Engine whose prefix cache is one of KV blocks of tokens and which
    publishes what it stores and evicts (KvPublisher)."""

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self.kv = KvPublisher()

    @staticmethod
    def _block_hashes(tokens: List[int],
                      lora: Optional[str] = None) -> List[int]:
        # an adapter's chain starts from its name: its blocks never hash
        # as the base model's or another adapter's
        out, prev = [], (lora or "").encode()
        for off in range(0, len(tokens) - KV_BLOCK + 1, KV_BLOCK):
            blk = struct.pack(f"<{KV_BLOCK}I", *tokens[off:off + KV_BLOCK])
            prev = hashlib.blake2b(prev + blk, digest_size=8).digest()
            out.append(int.from_bytes(prev, "big") >> 1)  # a positive int64
        return out

    def admit_tokens(self, tokens: List[int],
                     lora: Optional[str] = None) -> Tuple[int, int]:
        keys = self._block_hashes(tokens, lora)
        with self.lock:
            cached = 0
            while cached < len(keys) and keys[cached] in self.cache:
                cached += 1
            run: List[int] = []  # new blocks, stored as runs
            for d, k in enumerate(keys):
                if k not in self.cache:
                    run.append(d)
                elif run:
                    self._store(keys, tokens, run, lora)
                    run = []
                self.cache[k] = None
                self.cache.move_to_end(k)
            if run:
                self._store(keys, tokens, run, lora)
            gone = []
            while len(self.cache) > self.cache_blocks:
                gone.append(self.cache.popitem(last=False)[0])
            if gone:
                self.kv.removed(gone)
            self.running += 1
            self.served += 1
        return cached, len(keys)

    def _store(self, keys: List[int], tokens: List[int], run: List[int],
               lora: Optional[str] = None) -> None:
        d0, d1 = run[0], run[-1] + 1
        self.kv.stored(keys[d0:d1], keys[d0 - 1] if d0 > 0 else None,
                       tokens[d0 * KV_BLOCK:d1 * KV_BLOCK], lora)

    def clear(self) -> None:
        with self.lock:
            self.cache.clear()
            self.kv.cleared()


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "fake-engine/0.1"
    protocol_version = "HTTP/1.0"

    @property
    def engine(self) -> Engine:
        return self.server.engine  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _admin(self) -> None:
        """Test hooks: POST /admin/hold {"on": true} (requests wait before
        their first token from now on; false lets every one go),
        /admin/release {"n": N} (N of them go on); of a KvEngine, POST
        /admin/drop_next_batch (the next batch is kept for replay but
        never sent), /admin/clear (the cache is emptied:
        AllBlocksCleared)."""
        e = self.engine
        if self.path in ("/admin/hold", "/admin/release"):
            try:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/admin/hold":
                    e.set_hold(bool(body.get("on", True)))
                else:
                    e.release(int(body.get("n", 1)))
            except (ValueError, TypeError, AttributeError) as err:
                self._json(400, {"error": str(err)})
                return
            self._json(200, e.state())
        elif self.path == "/admin/fail_next":
            try:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                with e.lock:
                    e.fail_next = int(body.get("n", 1))
                    e.fail_status = int(body.get("status", 500))
            except (ValueError, TypeError, AttributeError) as err:
                self._json(400, {"error": str(err)})
                return
            self._json(200, {"ok": True})
        elif not isinstance(e, KvEngine):
            self._json(404, {"error": "no KV events"})
        elif self.path == "/admin/drop_next_batch":
            with e.kv.lock:
                e.kv.drop_next += 1
            self._json(200, {"ok": True})
        elif self.path == "/admin/clear":
            e.clear()
            self._json(200, {"ok": True})
        else:
            self._json(404, {"error": "not found"})

    def _lora_admin(self) -> None:
        """vLLM's runtime LoRA endpoints (VLLM_ALLOW_RUNTIME_LORA_UPDATING):
        POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
        /v1/unload_lora_adapter {"lora_name"}; 400 as vLLM answers an
        adapter loaded twice, or unloaded when not loaded."""
        e = self.engine
        try:
            n = int(self.headers.get("Content-Length", "0"))
            name = json.loads(self.rfile.read(n) or b"{}")["lora_name"]
            if not isinstance(name, str) or not name:
                raise ValueError("lora_name: expected a name")
        except (ValueError, TypeError, KeyError) as err:
            self._json(400, {"object": "error", "message": str(err),
                             "type": "BadRequestError", "code": 400})
            return
        if not e.max_loras:
            ok, msg = False, "LoRA is not enabled"
        elif self.path == "/v1/load_lora_adapter":
            ok = e.load_adapter(name)
            msg = (f"Success: LoRA adapter '{name}' added successfully."
                   if ok else f"The lora adapter '{name}' has already "
                   "been loaded.")
        else:
            ok = e.unload_adapter(name)
            msg = (f"Success: LoRA adapter '{name}' removed successfully."
                   if ok else f"The lora adapter '{name}' cannot be found.")
        if not ok:
            self._json(400, {"object": "error", "message": msg,
                             "type": "BadRequestError", "code": 400})
            return
        data = msg.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _pull(self, kvp: Dict[str, Any], cached: int, blocks: int) -> int:
        """A decode leg's KV: the blocks it does not hold (the prompt's
        after its `cached` leading ones) read from the prefill engine the
        params name (its POST /kv/pull at remote_host:remote_port, this
        fake's side channel), which frees them. The blocks received;
        0 when the pull fails (the engine then computes them, as vLLM's
        recompute policy for a failed KV load)."""
        e = self.engine
        ids = kvp.get("remote_block_ids")
        want = ids[cached:blocks] if isinstance(ids, list) else []
        try:
            c = http.client.HTTPConnection(str(kvp.get("remote_host")),
                                           int(kvp.get("remote_port")),
                                           timeout=10)
            try:
                c.request("POST", "/kv/pull", json.dumps({
                    "remote_request_id": kvp.get("remote_request_id"),
                    "remote_engine_id": kvp.get("remote_engine_id"),
                    "remote_block_ids": want}).encode(),
                    {"Content-Type": "application/json"})
                r = c.getresponse()
                got = json.loads(r.read()) if r.status == 200 else None
            finally:
                c.close()
            n = int(got["blocks"]) if isinstance(got, dict) else -1
        except (OSError, ValueError, TypeError, KeyError):
            n = -1
        if n < 0:
            with e.lock:
                e.pull_failures += 1
            return 0
        return min(n, blocks - cached)

    def _kv_pull(self) -> None:
        """The side channel's read: {"remote_request_id", "remote_block_ids",
        "remote_engine_id"} -> {"blocks": N read}; the hold is freed. 404
        for a hold it does not keep, or another engine's id."""
        e = self.engine
        try:
            n = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(n) or b"{}")
            rid = body["remote_request_id"]
        except (ValueError, TypeError, KeyError) as err:
            self._json(400, {"error": str(err)})
            return
        got = (e.pd_release(str(rid), body.get("remote_block_ids"))
               if body.get("remote_engine_id") in (None, e.engine_id)
               else None)
        if got is None:
            self._json(404, {"error": f"no blocks held for {rid!r}"})
            return
        self._json(200, {"blocks": got})

    def do_GET(self) -> None:
        if self.path == "/kv" and isinstance(self.engine, KvEngine):
            kv = self.engine.kv
            self._json(200, {"pub": kv.pub_endpoint,
                             "replay": kv.replay_endpoint, "seq": kv.seq,
                             "sent": kv.sent, "dropped": kv.dropped,
                             "replays": kv.replays})
            return
        if self.path == "/admin/state":
            self._json(200, self.engine.state())
        elif self.path == "/health":
            self._json(200, {"ok": True, "name": self.engine.name})
        elif self.path == "/v1/models":
            self._json(200, self.engine.model_list())
        elif self.path == "/metrics":
            e = self.engine
            with e.lock:
                text = (
                    f"vllm:num_requests_running {e.running}\n"
                    f"vllm:num_requests_waiting 0\n"
                    f"vllm:kv_cache_usage_perc "
                    f"{len(e.cache) / e.cache_blocks:.4f}\n"
                    + e.lora_metrics() + e.pd_metrics())
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.startswith("/admin/"):
            self._admin()
            return
        if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            self._lora_admin()
            return
        if self.path == "/kv/pull":
            self._kv_pull()
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": "not found"})
            return
        try:
            n = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(n) or b"{}")
            _, text = prompt_text(body)
            max_tokens = int(body.get("max_tokens", 8))
        except (ValueError, TypeError) as e:
            self._json(400, {"error": str(e)})
            return
        e = self.engine
        try:
            adapter = e.adapter_of(body)
        except KeyError:
            self._json(404, {"object": "error",
                             "message": f"The model `{body.get('model')}` "
                                        "does not exist.",
                             "type": "NotFoundError", "param": None,
                             "code": 404})
            return
        # vLLM's disaggregated serving (NixlConnector): a prefill leg
        # asks do_remote_decode, a decode leg brings the prefill's
        # answer with do_remote_prefill; anything else is whole.
        kvp = body.get("kv_transfer_params")
        kvp = kvp if isinstance(kvp, dict) else None
        kind = ("prefill" if kvp and kvp.get("do_remote_decode") else
                "decode" if kvp and kvp.get("do_remote_prefill") else
                "whole")
        xid = self.headers.get("X-Request-Id") or \
            f"fake-{e.name}-{time.monotonic_ns()}"
        rec = {"user": body.get("user"),
               "x_request_id": self.headers.get("X-Request-Id"),
               "kind": kind,
               "kv_transfer_params": body.get("kv_transfer_params"),
               "stream": body.get("stream"),
               "max_tokens": body.get("max_tokens"), "path": self.path,
               "fields": sorted(body)}
        e.arrive(str(body.get("user", "")), rec)
        status = e.take_failure()
        if status is not None:
            self._json(status, {"object": "error", "message":
                                "injected failure", "type":
                                "InternalServerError", "param": None,
                                "code": status})
            return
        loaded = e.lora_begin(adapter) if adapter is not None else False
        if isinstance(e, KvEngine):
            cached, blocks = e.admit_tokens(prompt_tokens(body), adapter)
        else:
            cached, blocks = e.admit(text, adapter or "")
        # The prompt's blocks: cached here, received from a prefill
        # engine (a decode leg whose pull succeeded), computed here.
        received = self._pull(kvp, cached, blocks) if kind == "decode" \
            else 0
        computed = blocks - cached - received
        e.pd_count(kind, computed, cached, received)
        kv_out: Optional[Dict[str, Any]] = None
        if kind == "prefill":  # kept for the decode engine to pull
            host, port = self.server.server_address[:2]
            kv_out = {"do_remote_prefill": True, "do_remote_decode": False,
                      "remote_block_ids": e.pd_hold(xid, blocks),
                      "remote_engine_id": e.engine_id,
                      "remote_host": host, "remote_port": port,
                      "remote_request_id": xid, "tp_size": 1}
            with e.lock:
                rec["returned"] = kv_out
        running = False
        try:
            e.wait_gate()
            if adapter is not None:
                e.lora_step(adapter, True)
                running = True
            time.sleep(e.base_s + e.per_block_s * computed
                       + e.transfer_block_s * received
                       + (e.lora_load_s if loaded else 0.0))
            # cached_tokens as vLLM reports it, in 4-byte tokens (the
            # gateway's pseudo-tokens): 16 per 64-byte block; as vLLM's,
            # it counts the tokens a decode leg received (computed
            # elsewhere). computed_blocks and received_blocks tell them
            # apart.
            usage = {"prompt_tokens": len(text.encode()) // 4,
                     "completion_tokens": max_tokens,
                     "prompt_tokens_details": {
                         "cached_tokens": (cached + received) * BLOCK // 4},
                     "cached_blocks": cached, "prompt_blocks": blocks,
                     "computed_blocks": computed,
                     "received_blocks": received, "kv_leg": kind,
                     "lora": adapter, "lora_loaded": loaded}
            chat = self.path.endswith("chat/completions")
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i in range(max_tokens):
                    if i > 0:
                        time.sleep(e.per_token_s)
                    piece = f" tok{i}"
                    chunk = ({"choices": [{"delta": {"content": piece}}]}
                             if chat else {"choices": [{"text": piece}]})
                    chunk["backend"] = e.name
                    self.wfile.write(b"data: " + json.dumps(chunk).encode()
                                     + b"\n\n")
                    self.wfile.flush()
                final = {"choices": [], "backend": e.name, "usage": usage}
                if kv_out is not None:
                    final["kv_transfer_params"] = kv_out
                self.wfile.write(b"data: " + json.dumps(final).encode()
                                 + b"\n\ndata: [DONE]\n\n")
                self.wfile.flush()
            else:
                time.sleep(e.per_token_s * max(0, max_tokens - 1))
                out = "".join(f" tok{i}" for i in range(max_tokens))
                choice = ({"message": {"role": "assistant", "content": out}}
                          if chat else {"text": out})
                self._json(200, {"choices": [choice], "backend": e.name,
                                 "usage": usage,
                                 "kv_transfer_params": kv_out})
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            if adapter is not None:
                if running:
                    e.lora_step(adapter, False)
                else:
                    e.lora_drop(adapter)
            e.done()


# ---- llama.cpp's llama-server, in small ---------------------------------------

LLAMA_VOCAB = 32000
_PIECE = re.compile(r"\s*\S+|\s+$")


class LlamaEngine:
    """What a gateway sees of llama.cpp's llama-server (tools/real-fleet
    runs the real one):

    - prompts are token ids, or text tokenized by a small word tokenizer of
      its own (`tokenize`: each word with its leading spaces is one token,
      its id a hash; `add_special` puts BOS (1) first); chat messages are
      rendered with a ChatML template first (`/apply-template`);
    - `slots` slots, each keeping the tokens of its last request (prompt
      and output): a request takes the idle slot whose tokens share the
      longest prefix with its prompt when that is more than a tenth of the
      prompt, else the least recently used idle slot, and waits while none
      is idle; the shared prefix is reused (`timings.cache_n`, at most all
      but the last prompt token), the rest computed (`timings.prompt_n`),
      at `per_token_s` each after `base_s`;
    - POST /completion (native: `n_predict`, `return_tokens`, a stream of
      `{"content", "tokens", "stop": false}` events ending with a `"stop":
      true` event that has the timings, and no [DONE]), /v1/completions
      and /v1/chat/completions (OpenAI's shape plus `timings`, and
      `usage.prompt_tokens_details.cached_tokens`), /tokenize,
      /apply-template, /health, /slots, and /metrics with llama.cpp's
      `llamacpp:` names, or 501 as without `--metrics`; with
      `metrics_wait`, /metrics waits while a prompt is being computed, as
      the real one's answer waits for its task loop;
    - POST /admin/fail_next {"after": K}: the next completion fails after K
      output tokens (K = 0: an HTTP 500 before any, as llama.cpp answers an
      error that comes before the first token; a stream that has begun
      gets a `data: {"error": ...}` event and ends).
    """

    def __init__(self, name: str, *, slots: int = 2, base_s: float = 0.005,
                 per_token_s: float = 0.0005, decode_s: float = 0.001,
                 metrics: bool = True, metrics_wait: bool = False) -> None:
        self.name = name
        self.base_s, self.per_token_s, self.decode_s = (base_s, per_token_s,
                                                        decode_s)
        self.metrics, self.metrics_wait = metrics, metrics_wait
        self.cond = threading.Condition()
        self.slots: List[Dict[str, Any]] = [
            {"id": i, "tokens": [], "busy": False, "last": 0.0}
            for i in range(slots)]
        self.deferred = 0
        self.prefilling = 0
        self.prompt_tokens_total = 0
        self.cached_total = 0
        self.predicted_total = 0
        self.served = 0
        self.fail_after: Optional[int] = None

    # ---- the tokenizer and the template -------------------------------

    @staticmethod
    def tokenize(text: str, add_special: bool = True
                 ) -> Tuple[List[int], List[str]]:
        pieces = _PIECE.findall(text)
        ids = [3 + int.from_bytes(hashlib.blake2b(
            p.encode(), digest_size=4).digest(), "little")
            % (LLAMA_VOCAB - 3) for p in pieces]
        if add_special:
            return [1] + ids, [""] + pieces
        return ids, pieces

    @staticmethod
    def render(messages: Any) -> str:
        if not isinstance(messages, list):
            raise ValueError("messages: expected a list")
        out = []
        for m in messages:
            if not isinstance(m, dict):
                raise ValueError("messages: each must be an object")
            out.append(f"<|im_start|>{m.get('role', 'user')}\n"
                       f"{m.get('content', '')}<|im_end|>\n")
        return "".join(out) + "<|im_start|>assistant\n"

    def prompt_of(self, path: str, body: Dict[str, Any]) -> List[int]:
        if path.endswith("chat/completions"):
            return self.tokenize(self.render(body.get("messages")))[0]
        p = body.get("prompt", "")
        if isinstance(p, str):
            return self.tokenize(p)[0]
        if isinstance(p, list) and all(isinstance(t, int) and
                                       0 <= t < LLAMA_VOCAB for t in p):
            return list(p)
        raise ValueError("prompt: a string or a list of token ids "
                         f"below {LLAMA_VOCAB}")

    # ---- slots ----------------------------------------------------------

    def acquire(self, toks: List[int]) -> Tuple[Dict[str, Any], int]:
        """A slot for the prompt (waiting while every slot is busy) and
        the prompt tokens it reuses."""
        with self.cond:
            self.deferred += 1
            while all(s["busy"] for s in self.slots):
                self.cond.wait()
            self.deferred -= 1
            best, best_sim = None, 0.0
            for s in self.slots:
                if s["busy"] or not s["tokens"]:
                    continue
                sim = _lcp(s["tokens"], toks) / max(len(toks), 1)
                if sim > best_sim and sim > 0.1:
                    best, best_sim = s, sim
            if best is None:
                best = min((s for s in self.slots if not s["busy"]),
                           key=lambda s: s["last"])
            best["busy"] = True
            cached = min(_lcp(best["tokens"], toks), max(len(toks) - 1, 0))
            self.prefilling += 1
            self.served += 1
            fail, self.fail_after = self.fail_after, None
        best["fail"] = fail
        return best, cached

    def prefilled(self) -> None:
        with self.cond:
            self.prefilling -= 1
            self.cond.notify_all()

    def release(self, slot: Dict[str, Any], tokens: List[int]) -> None:
        """Once per acquire(): the slot keeps `tokens`."""
        with self.cond:
            if not slot["busy"]:
                return
            slot["tokens"] = tokens
            slot["busy"] = False
            slot["last"] = time.monotonic()
            self.cond.notify_all()

    def metrics_text(self) -> str:
        with self.cond:
            if self.metrics_wait:
                self.cond.wait_for(lambda: self.prefilling == 0, timeout=30)
            busy = sum(s["busy"] for s in self.slots)
            return (f"# TYPE llamacpp:prompt_tokens_total counter\n"
                    f"llamacpp:prompt_tokens_total {self.prompt_tokens_total}\n"
                    f"llamacpp:prompt_tokens_cached_total {self.cached_total}\n"
                    f"llamacpp:tokens_predicted_total {self.predicted_total}\n"
                    f"# TYPE llamacpp:requests_processing gauge\n"
                    f"llamacpp:requests_processing {busy}\n"
                    f"llamacpp:requests_deferred {self.deferred}\n")


def _lcp(a: List[int], b: List[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class LlamaHandler(http.server.BaseHTTPRequestHandler):
    server_version = "fake-llama-server/0.1"
    protocol_version = "HTTP/1.0"

    @property
    def engine(self) -> LlamaEngine:
        return self.server.engine  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, msg: str, kind: str) -> None:
        self._json(code, {"error": {"code": code, "message": msg,
                                    "type": kind}})

    def do_GET(self) -> None:
        try:
            self._get()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (metrics_wait)

    def _get(self) -> None:
        e = self.engine
        if self.path in ("/health", "/v1/health"):
            self._json(200, {"status": "ok"})
        elif self.path == "/metrics":
            if not e.metrics:
                self._error(501, "This server does not support metrics "
                            "endpoint. Start it with `--metrics`",
                            "not_supported_error")
                return
            data = e.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/slots":
            with e.cond:
                rows = [{"id": s["id"], "is_processing": s["busy"],
                         "n_ctx": 4096} for s in e.slots]
            self._json(200, rows)
        else:
            self._error(404, "File Not Found", "not_found_error")

    def do_POST(self) -> None:
        e = self.engine
        try:
            n = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(n) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except (ValueError, TypeError) as err:
            self._error(400, str(err), "invalid_request_error")
            return
        if self.path == "/admin/fail_next":
            with e.cond:
                e.fail_after = int(body.get("after", 0))
            self._json(200, {"ok": True})
            return
        if self.path == "/tokenize":
            ids, pieces = e.tokenize(str(body.get("content", "")),
                                     bool(body.get("add_special", False)))
            if body.get("with_pieces"):
                self._json(200, {"tokens": [{"id": i, "piece": p} for i, p
                                            in zip(ids, pieces)]})
            else:
                self._json(200, {"tokens": ids})
            return
        if self.path == "/apply-template":
            try:
                self._json(200, {"prompt": e.render(body.get("messages"))})
            except ValueError as err:
                self._error(400, str(err), "invalid_request_error")
            return
        if self.path not in ("/completion", "/completions", "/v1/completions",
                             "/v1/chat/completions"):
            self._error(404, "File Not Found", "not_found_error")
            return
        try:
            toks = e.prompt_of(self.path, body)
            native = not self.path.startswith("/v1/")
            n_out = int(body.get("n_predict" if native else "max_tokens",
                                 16))
        except (ValueError, TypeError) as err:
            self._error(400, str(err), "invalid_request_error")
            return
        self._complete(e, toks, body, native, n_out)

    def _complete(self, e: LlamaEngine, toks: List[int], body: Dict[str, Any],
                  native: bool, n_out: int) -> None:
        slot, cached = e.acquire(toks)
        out: List[int] = []
        try:
            prompt_n = len(toks) - cached
            t0 = time.monotonic()
            time.sleep(e.base_s + e.per_token_s * prompt_n)
            prompt_ms = (time.monotonic() - t0) * 1e3
            e.prefilled()
            with e.cond:
                e.prompt_tokens_total += prompt_n
                e.cached_total += cached
            fail = slot.pop("fail", None)
            if fail == 0 or (fail is not None and not body.get("stream")):
                self._error(500, "injected failure", "server_error")
                return
            seed = int.from_bytes(hashlib.blake2b(
                struct.pack(f"<{len(toks)}I", *toks),
                digest_size=4).digest(), "little")
            out = [3 + (seed + 7919 * i) % (LLAMA_VOCAB - 3)
                   for i in range(n_out)]
            timings = {"cache_n": cached, "prompt_n": prompt_n,
                       "prompt_ms": prompt_ms, "predicted_n": n_out,
                       "predicted_ms": e.decode_s * n_out * 1e3}
            chat = self.path.endswith("chat/completions")
            if body.get("stream"):
                self._stream(e, slot, toks, out, fail, native, chat, body,
                             timings)
            else:
                time.sleep(e.decode_s * n_out)
                # as llama.cpp does, the slot is free before the answer
                # goes out
                e.release(slot, toks + out)
                self._whole(e, slot, toks, out, native, chat, body, timings)
            with e.cond:
                e.predicted_total += len(out)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            e.release(slot, toks + out)

    def _usage(self, toks: List[int], out: List[int],
               timings: Dict[str, Any]) -> Dict[str, Any]:
        return {"completion_tokens": len(out), "prompt_tokens": len(toks),
                "total_tokens": len(out) + len(toks),
                "prompt_tokens_details": {"cached_tokens":
                                          timings["cache_n"]}}

    def _whole(self, e: LlamaEngine, slot: Dict[str, Any], toks: List[int],
               out: List[int], native: bool, chat: bool,
               body: Dict[str, Any], timings: Dict[str, Any]) -> None:
        text = "".join(f" w{t}" for t in out)
        if native:
            res = {"index": 0, "content": text, "id_slot": slot["id"],
                   "stop": True, "model": e.name, "tokens_predicted": len(out),
                   "tokens_evaluated": len(toks),
                   "tokens_cached": timings["cache_n"] + len(out),
                   "timings": timings,
                   "tokens": out if body.get("return_tokens") else []}
        else:
            choice = ({"index": 0, "finish_reason": "length",
                       "message": {"role": "assistant", "content": text}}
                      if chat else
                      {"index": 0, "finish_reason": "length", "text": text})
            res = {"choices": [choice], "model": e.name,
                   "object": "chat.completion" if chat else "text_completion",
                   "usage": self._usage(toks, out, timings),
                   "timings": timings}
        self._json(200, res)

    def _stream(self, e: LlamaEngine, slot: Dict[str, Any], toks: List[int],
                out: List[int], fail: Optional[int], native: bool, chat: bool,
                body: Dict[str, Any], timings: Dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def send(obj: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        for i, t in enumerate(out):
            if fail is not None and i == fail:
                send({"error": {"code": 500, "message": "injected failure",
                                "type": "server_error"}})
                return
            if i > 0:
                time.sleep(e.decode_s)
            piece = f" w{t}"
            if native:
                ev = {"index": 0, "content": piece, "stop": False,
                      "id_slot": slot["id"], "tokens_predicted": i + 1,
                      "tokens_evaluated": len(toks)}
                if body.get("return_tokens"):
                    ev["tokens"] = [t]
            elif chat:
                ev = {"choices": [{"index": 0, "finish_reason": None,
                                   "delta": {"content": piece}}],
                      "object": "chat.completion.chunk"}
            else:
                ev = {"choices": [{"index": 0, "finish_reason": None,
                                   "text": piece}],
                      "object": "text_completion"}
            send(ev)
        e.release(slot, toks + out)
        if native:
            send({"index": 0, "content": "", "stop": True,
                  "id_slot": slot["id"], "model": e.name,
                  "tokens_predicted": len(out), "tokens_evaluated": len(toks),
                  "tokens_cached": timings["cache_n"] + len(out),
                  "timings": timings})
            return  # llama.cpp's native stream has no [DONE]
        last: Dict[str, Any] = {
            "choices": [{"index": 0, "finish_reason": "length",
                         "delta" if chat else "text": {} if chat else ""}],
            "object": "chat.completion.chunk" if chat else "text_completion"}
        if (body.get("stream_options") or {}).get("include_usage"):
            send(last)
            last = {"choices": [], "usage": self._usage(toks, out, timings)}
        last["timings"] = timings
        send(last)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class EngineServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # bursts of clients: the default 5 resets them

    def __init__(self, addr: Tuple[str, int], engine: Any) -> None:
        super().__init__(addr, LlamaHandler if isinstance(engine, LlamaEngine)
                         else Handler)
        self.engine = engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--cache-blocks", type=int, default=4096)
    ap.add_argument("--models", default="", metavar="A,B",
                    help="its served model names (vLLM's "
                         "--served-model-name; default: takes any)")
    ap.add_argument("--max-loras", type=int, default=0, metavar="N",
                    help="LoRA adapter slots (vLLM's --max-loras; 0: none)")
    ap.add_argument("--lora-modules", default=None, metavar="A,B",
                    help="the adapters it knows (default: any name)")
    ap.add_argument("--hide-adapters", action="store_true",
                    help="GET /v1/models lists its base models only")
    ap.add_argument("--kv-events", action="store_true",
                    help="publish vLLM KV-cache events over ZeroMQ")
    ap.add_argument("--llamacpp", action="store_true",
                    help="speak llama.cpp's llama-server API (LlamaEngine)")
    ap.add_argument("--slots", type=int, default=2,
                    help="--llamacpp: slots (default 2)")
    ap.add_argument("--no-metrics", action="store_true",
                    help="--llamacpp: /metrics answers 501")
    ap.add_argument("--metrics-wait", action="store_true",
                    help="--llamacpp: /metrics waits while a prompt is "
                         "computed")
    a = ap.parse_args()
    engine: Any
    if a.llamacpp:
        engine = LlamaEngine(a.name, slots=a.slots, metrics=not a.no_metrics,
                             metrics_wait=a.metrics_wait)
    else:
        lora = {"models": tuple(m for m in a.models.split(",") if m),
                "max_loras": a.max_loras,
                "loras": None if a.lora_modules is None else
                tuple(m for m in a.lora_modules.split(",") if m),
                "hide_adapters": a.hide_adapters}
        engine = (KvEngine if a.kv_events else Engine)(
            a.name, cache_blocks=a.cache_blocks, **lora)
    srv = EngineServer((a.host, a.port), engine)
    # one line for whoever started us: where to reach it
    ready: Dict[str, Any] = {"http": srv.server_address[1]}
    if isinstance(engine, KvEngine):
        ready.update(pub=engine.kv.pub_endpoint,
                     replay=engine.kv.replay_endpoint)
    print("READY " + json.dumps(ready), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
