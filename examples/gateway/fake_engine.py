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

    python3 fake_engine.py --port 8101 --name e1

With --kv-events it also publishes vLLM KV-cache events over ZeroMQ, as
vLLM does with `--kv-events-config` (see KvEngine): its cache is then one
of 16-token blocks of the prompt's tokens as the gateway computes them
(libroute's text_tokens, each message on its own), every block stored or
evicted is a BlockStored / BlockRemoved event, and every batch goes out on
a PUB socket as [topic, sequence number (8 bytes big endian), msgpack
payload] and stays in a replay buffer served on a ROUTER socket.

    python3 fake_engine.py --port 8101 --name e1 --kv-events
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.server
import json
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

    def __init__(self, name: str, *, cache_blocks: int = 4096,
                 base_s: float = 0.01, per_block_s: float = 0.002,
                 per_token_s: float = 0.002) -> None:
        self.name = name
        self.cache_blocks = cache_blocks
        self.base_s = base_s
        self.per_block_s = per_block_s
        self.per_token_s = per_token_s
        self.lock = threading.Lock()
        self.cache: "collections.OrderedDict[bytes, None]" = \
            collections.OrderedDict()
        self.running = 0
        self.served = 0

    def admit(self, text: str) -> Tuple[int, int]:
        """Look the prompt up in the cache and insert it: (cached blocks,
        all blocks). Hits count only for leading blocks."""
        data = text.encode("utf-8")
        keys = []
        h = b""
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
               tokens: List[int]) -> None:
        with self.lock:
            self.pending.append(("BlockStored", hashes, parent, tokens))

    def removed(self, hashes: List[int]) -> None:
        with self.lock:
            self.pending.append(("BlockRemoved", hashes))

    def cleared(self) -> None:
        with self.lock:
            self.pending.append(("AllBlocksCleared",))

    def _event(self, ev: Any, as_map: bool) -> Any:
        if ev[0] == "BlockStored":
            _, hashes, parent, tokens = ev
            if as_map:  # vLLM >= 0.12: msgspec structs as maps
                return {"type": "BlockStored", "block_hashes": hashes,
                        "parent_block_hash": parent, "token_ids": tokens,
                        "block_size": KV_BLOCK, "lora_id": None,
                        "medium": "GPU", "lora_name": None, "group_idx": 0,
                        "kv_cache_spec_kind": "full_attention"}
            return ["BlockStored", hashes, parent, tokens, KV_BLOCK, None,
                    "GPU", None, None, 0]
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
    def _block_hashes(tokens: List[int]) -> List[int]:
        out, prev = [], b""
        for off in range(0, len(tokens) - KV_BLOCK + 1, KV_BLOCK):
            blk = struct.pack(f"<{KV_BLOCK}I", *tokens[off:off + KV_BLOCK])
            prev = hashlib.blake2b(prev + blk, digest_size=8).digest()
            out.append(int.from_bytes(prev, "big") >> 1)  # a positive int64
        return out

    def admit_tokens(self, tokens: List[int]) -> Tuple[int, int]:
        keys = self._block_hashes(tokens)
        with self.lock:
            cached = 0
            while cached < len(keys) and keys[cached] in self.cache:
                cached += 1
            run: List[int] = []  # new blocks, stored as runs
            for d, k in enumerate(keys):
                if k not in self.cache:
                    run.append(d)
                elif run:
                    self._store(keys, tokens, run)
                    run = []
                self.cache[k] = None
                self.cache.move_to_end(k)
            if run:
                self._store(keys, tokens, run)
            gone = []
            while len(self.cache) > self.cache_blocks:
                gone.append(self.cache.popitem(last=False)[0])
            if gone:
                self.kv.removed(gone)
            self.running += 1
            self.served += 1
        return cached, len(keys)

    def _store(self, keys: List[int], tokens: List[int],
               run: List[int]) -> None:
        d0, d1 = run[0], run[-1] + 1
        self.kv.stored(keys[d0:d1], keys[d0 - 1] if d0 > 0 else None,
                       tokens[d0 * KV_BLOCK:d1 * KV_BLOCK])

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
        """Test hooks of a KvEngine: POST /admin/drop_next_batch (the next
        batch is kept for replay but never sent), /admin/clear (the cache
        is emptied: AllBlocksCleared)."""
        e = self.engine
        if not isinstance(e, KvEngine):
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

    def do_GET(self) -> None:
        if self.path == "/kv" and isinstance(self.engine, KvEngine):
            kv = self.engine.kv
            self._json(200, {"pub": kv.pub_endpoint,
                             "replay": kv.replay_endpoint, "seq": kv.seq,
                             "sent": kv.sent, "dropped": kv.dropped,
                             "replays": kv.replays})
            return
        if self.path == "/health":
            self._json(200, {"ok": True, "name": self.engine.name})
        elif self.path == "/metrics":
            e = self.engine
            with e.lock:
                text = (
                    f"vllm:num_requests_running {e.running}\n"
                    f"vllm:num_requests_waiting 0\n"
                    f"vllm:kv_cache_usage_perc "
                    f"{len(e.cache) / e.cache_blocks:.4f}\n")
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
        if isinstance(e, KvEngine):
            cached, blocks = e.admit_tokens(prompt_tokens(body))
        else:
            cached, blocks = e.admit(text)
        try:
            time.sleep(e.base_s + e.per_block_s * (blocks - cached))
            # cached_tokens as vLLM reports it, in 4-byte tokens (the
            # gateway's pseudo-tokens): 16 per 64-byte block.
            usage = {"prompt_tokens": len(text.encode()) // 4,
                     "completion_tokens": max_tokens,
                     "prompt_tokens_details": {
                         "cached_tokens": cached * BLOCK // 4},
                     "cached_blocks": cached, "prompt_blocks": blocks}
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
                self.wfile.write(b"data: " + json.dumps(final).encode()
                                 + b"\n\ndata: [DONE]\n\n")
                self.wfile.flush()
            else:
                time.sleep(e.per_token_s * max(0, max_tokens - 1))
                out = "".join(f" tok{i}" for i in range(max_tokens))
                choice = ({"message": {"role": "assistant", "content": out}}
                          if chat else {"text": out})
                self._json(200, {"choices": [choice], "backend": e.name,
                                 "usage": usage})
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            e.done()


class EngineServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # bursts of clients: the default 5 resets them

    def __init__(self, addr: Tuple[str, int], engine: Engine) -> None:
        super().__init__(addr, Handler)
        self.engine = engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--cache-blocks", type=int, default=4096)
    ap.add_argument("--kv-events", action="store_true",
                    help="publish vLLM KV-cache events over ZeroMQ")
    a = ap.parse_args()
    engine = (KvEngine(a.name, cache_blocks=a.cache_blocks) if a.kv_events
              else Engine(a.name, cache_blocks=a.cache_blocks))
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
