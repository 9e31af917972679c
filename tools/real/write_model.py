"""Write a llama-architecture GGUF model with random weights and a real
vocabulary, for engines whose compute is real and whose text is noise.

    PYTHONPATH=LLAMA_SRC/gguf-py python3 write_model.py --vocab FILE \\
        --out MODEL.gguf [--layers 8] [--width 512] [--ffn 1536] \\
        [--heads 8] [--kv-heads 8] [--ctx 16384] [--seed 1]

The vocabulary (tokenizer model, tokens, scores, types, merges and special
ids) is copied from one of llama.cpp's models/ggml-vocab-*.gguf files,
which hold a tokenizer and no weights. The weights are drawn from N(0,
0.02) (norms are 1) with a fixed seed, in f16, so the same flags give the
same bytes. Needs numpy (Debian's python3-numpy) and gguf-py from the
llama.cpp source; run by tools/real/realfleet.py, which puts gguf-py on the
path.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import gguf  # llama.cpp's gguf-py, on PYTHONPATH


def copy_vocab(w: "gguf.GGUFWriter", vocab_path: str) -> int:
    """Every tokenizer.* field of the vocabulary file; returns its size."""
    r = gguf.GGUFReader(vocab_path)
    n_vocab = 0
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        main = f.types[0]
        if main == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            val = f.contents()
            w.add_key_value(name, val, main, sub_type=sub)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        else:
            w.add_key_value(name, f.contents(), main)
    if n_vocab == 0:
        raise SystemExit(f"{vocab_path}: no tokenizer.ggml.tokens")
    return n_vocab


# A ChatML template, so /v1/chat/completions renders messages the same way
# whichever vocabulary the model has.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
          "{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True, help="a ggml-vocab-*.gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=0,
                    help="feed-forward width (default 3 x width)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="KV heads (default: --heads)")
    ap.add_argument("--ctx", type=int, default=16384,
                    help="the model's trained context length")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    ffn = a.ffn or 3 * a.width
    kv_heads = a.kv_heads or a.heads
    if a.width % a.heads or a.heads % kv_heads:
        raise SystemExit("--width must be a multiple of --heads, and "
                         "--heads of --kv-heads")
    head_dim = a.width // a.heads

    tmp = a.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"random llama L{a.layers} W{a.width} seed {a.seed}")
    n_vocab = copy_vocab(w, a.vocab)
    w.add_chat_template(CHATML)
    w.add_vocab_size(n_vocab)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.width)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(a.seed)

    def weight(rows: int, cols: int) -> "np.ndarray":
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        return (x * np.float32(0.02)).astype(np.float16)

    def ones(n: int) -> "np.ndarray":
        return np.ones(n, dtype=np.float32)

    # numpy shapes are (rows, cols) = (out, in); gguf reverses them.
    w.add_tensor("token_embd.weight", weight(n_vocab, a.width))
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(a.width))
        w.add_tensor(p + "attn_q.weight", weight(a.width, a.width))
        w.add_tensor(p + "attn_k.weight", weight(kv_heads * head_dim,
                                                 a.width))
        w.add_tensor(p + "attn_v.weight", weight(kv_heads * head_dim,
                                                 a.width))
        w.add_tensor(p + "attn_output.weight", weight(a.width, a.width))
        w.add_tensor(p + "ffn_norm.weight", ones(a.width))
        w.add_tensor(p + "ffn_gate.weight", weight(ffn, a.width))
        w.add_tensor(p + "ffn_up.weight", weight(ffn, a.width))
        w.add_tensor(p + "ffn_down.weight", weight(a.width, ffn))
    w.add_tensor("output_norm.weight", ones(a.width))
    w.add_tensor("output.weight", weight(n_vocab, a.width))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, a.out)
    print(f"{a.out}: {os.path.getsize(a.out) / 1e6:.0f} MB, vocabulary "
          f"{n_vocab} from {os.path.basename(a.vocab)}", file=sys.stderr)


if __name__ == "__main__":
    main()
