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
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.server
import json
import threading
import time
from typing import Any, Dict, List, Tuple

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

    def do_GET(self) -> None:
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

    def __init__(self, addr: Tuple[str, int], engine: Engine) -> None:
        super().__init__(addr, Handler)
        self.engine = engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--cache-blocks", type=int, default=4096)
    a = ap.parse_args()
    srv = EngineServer((a.host, a.port),
                       Engine(a.name, cache_blocks=a.cache_blocks))
    srv.serve_forever()


if __name__ == "__main__":
    main()
