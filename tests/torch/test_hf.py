"""Hugging Face weights in and out (--init-from, --export) against a
plain-torch GPT2LMHeadModel written here: a tiny GPT-2 directory is built
by hand (config.json and safetensors bytes from struct and json, in f32,
bf16, f16 and as two shards with model.safetensors.index.json), then
  (a) weft-train --init-from A --steps 0 --export B gives A's tensors bit
      for bit (as f32; transformers' names, shapes and Conv1D layouts);
  (b) the reference's loss on the validation windows equals the loss weft
      evaluates for the loaded model (1e-5);
  (c) after a few training steps, at 1 process, at 2 with ZeRO-3 (the
      parameters loaded before they are sharded, gathered for export) and
      at tp 2 x pp 2 under weftrun, the exported model's loss in the
      reference equals the loss weft evaluated at the end (1e-5);
the same (a), (b) and (c) for a Llama (LlamaForCausalLM, untied and tied,
against test_llama_ref.py's torch reference); and what weft cannot
represent is refused with a message naming it."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import torch

VOCAB, CTX, DIM, LAYERS, HEADS, SEQ = 64, 32, 32, 2, 4, 16
ENV = {"WEFT_MATMUL": "portable", "OMP_NUM_THREADS": "1"}


def tokshard(path, tokens, vocab):
    """weft's token shard: a 64-byte header, then one byte a token."""
    body = bytes(tokens)
    head = b"WEFTTOKS" + struct.pack("<IIIIQI", 1, 64, vocab, 1, len(tokens), zlib.crc32(body))
    head += struct.pack("<I", zlib.crc32(head))
    with open(path, "wb") as f:
        f.write(head + bytes(64 - len(head)) + body)


DTYPES = {"F32": (torch.float32, torch.int32), "BF16": (torch.bfloat16, torch.int16),
          "F16": (torch.float16, torch.int16)}


def st_bytes(tensors, dtype="F32"):
    """A safetensors file's bytes: tensors is a list of (name, float tensor)."""
    fl, it = DTYPES[dtype]
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        ints = t.detach().to(fl).contiguous().view(it).flatten().tolist()
        raw = struct.pack(f"<{len(ints)}{'i' if it == torch.int32 else 'h'}", *ints)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_read(path):
    """name -> float64 tensor of a safetensors file (any float dtype)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        fl, it = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        raw = data[8 + n + b:8 + n + end]
        k = len(raw) // (4 if it == torch.int32 else 2)
        ints = torch.tensor(struct.unpack(f"<{k}{'i' if it == torch.int32 else 'h'}", raw),
                            dtype=it)
        out[name] = (ints.view(fl).to(torch.float64).reshape(e["shape"]), e["dtype"])
    return out


def gpt2_config(**over):
    c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
         "n_positions": CTX, "n_ctx": CTX, "n_embd": DIM, "n_layer": LAYERS, "n_head": HEADS,
         "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
         "tie_word_embeddings": True, "torch_dtype": "float32"}
    c.update(over)
    return c


def gpt2_weights(seed):
    """transformers' GPT-2 tensors (Conv1D weights [in, out]), random."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.1
    w = {"transformer.wte.weight": r(VOCAB, DIM), "transformer.wpe.weight": r(CTX, DIM)}
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        w.update({p + "ln_1.weight": 1 + r(DIM), p + "ln_1.bias": r(DIM),
                  p + "attn.c_attn.weight": r(DIM, 3 * DIM), p + "attn.c_attn.bias": r(3 * DIM),
                  p + "attn.c_proj.weight": r(DIM, DIM), p + "attn.c_proj.bias": r(DIM),
                  p + "ln_2.weight": 1 + r(DIM), p + "ln_2.bias": r(DIM),
                  p + "mlp.c_fc.weight": r(DIM, 4 * DIM), p + "mlp.c_fc.bias": r(4 * DIM),
                  p + "mlp.c_proj.weight": r(4 * DIM, DIM), p + "mlp.c_proj.bias": r(DIM)})
    w["transformer.ln_f.weight"] = 1 + r(DIM)
    w["transformer.ln_f.bias"] = r(DIM)
    return w


def gpt2_loss(w, tokens, seq):
    """GPT2LMHeadModel's forward in float64: mean cross-entropy of the
    windows of seq tokens (each with its next token as target)."""
    w = {k: v.to(torch.float64) for k, v in w.items()}
    x_ids = torch.tensor([t[:-1] for t in tokens])
    y_ids = torch.tensor([t[1:] for t in tokens])
    B, T = x_ids.shape
    hs = DIM // HEADS
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (DIM,), w[n + ".weight"],
                                                     w[n + ".bias"], 1e-5)
    x = w["transformer.wte.weight"][x_ids] + w["transformer.wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (z.view(B, T, HEADS, hs).transpose(1, 2) for z in qkv.split(DIM, dim=2))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, DIM)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = torch.nn.functional.gelu(h, approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    logits = ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y_ids.reshape(-1)).item()


LLAMA_FFN, LLAMA_KV = 88, 2


def llama_config(**over):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB,
         "hidden_size": DIM, "intermediate_size": LLAMA_FFN, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "num_key_value_heads": LLAMA_KV,
         "max_position_embeddings": CTX, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32"}
    c.update(over)
    return c


def llama_weights(seed, tied):
    """transformers' Llama tensors ([out, in] like weft's), random."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.1
    kv = DIM // HEADS * LLAMA_KV
    w = {"model.embed_tokens.weight": r(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + r(DIM),
                  p + "self_attn.q_proj.weight": r(DIM, DIM),
                  p + "self_attn.k_proj.weight": r(kv, DIM),
                  p + "self_attn.v_proj.weight": r(kv, DIM),
                  p + "self_attn.o_proj.weight": r(DIM, DIM),
                  p + "post_attention_layernorm.weight": 1 + r(DIM),
                  p + "mlp.gate_proj.weight": r(LLAMA_FFN, DIM),
                  p + "mlp.up_proj.weight": r(LLAMA_FFN, DIM),
                  p + "mlp.down_proj.weight": r(DIM, LLAMA_FFN)})
    w["model.norm.weight"] = 1 + r(DIM)
    if not tied:
        w["lm_head.weight"] = r(VOCAB, DIM)
    return w


LLAMA_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn.q",
               "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
               "self_attn.o_proj": "attn.o", "post_attention_layernorm": "mlp_norm",
               "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down"}


def llama_loss(w, tokens, seq, tied):
    """test_llama_ref.py's LlamaForCausalLM forward on transformers' names."""
    from test_llama_ref import llama_forward
    p = {"tok_emb.weight": w["model.embed_tokens.weight"], "norm.weight": w["model.norm.weight"]}
    if not tied:
        p["lm_head.weight"] = w["lm_head.weight"]
    for name, t in w.items():
        if name.startswith("model.layers."):
            i, rest = name[len("model.layers."):].split(".", 1)
            p[f"blocks.{i}.{LLAMA_NAMES[rest[:-len('.weight')]]}.weight"] = t
    p = {k: v.to(torch.float32) for k, v in p.items()}
    cfg = {"layers": LAYERS, "heads": HEADS, "kv_heads": LLAMA_KV, "dim": DIM, "eps": 1e-5,
           "theta": 10000.0, "tied": tied}
    x = torch.tensor([t[:-1] for t in tokens])
    y = torch.tensor([t[1:] for t in tokens])
    logits = llama_forward(p, cfg, x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()


def val_windows(tokens, seq):
    """weft's validation windows of a shard: the last tenth, seq + 1 tokens
    each, non-overlapping (dataset_tokens.c)."""
    n = len(tokens)
    lo = int(0.9 * n)
    count = (n - lo - 1) // seq if n - lo > seq else 0
    return [tokens[lo + i * seq:lo + i * seq + seq + 1] for i in range(min(count, 4096))]


def val_loss(csv):
    with open(csv) as f:
        rows = [line.split(",") for line in f.read().splitlines()[1:]]
    vals = [float(r[3]) for r in rows if r[2] == "val"]
    return vals[-1] if vals else None


def write_dir(d, w, config, dtype="F32", shards=1, extra=()):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    items = list(w.items()) + list(extra)
    if shards == 1:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(st_bytes(items, dtype))
        return
    half = len(items) // 2
    parts = [items[:half], items[half:]]
    wmap = {}
    for k, part in enumerate(parts):
        fname = f"model-{k + 1:05d}-of-00002.safetensors"
        with open(os.path.join(d, fname), "wb") as f:
            f.write(st_bytes(part, dtype))
        wmap.update({name: fname for name, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)


def families():
    """name, config, weights, the reference loss (weights, windows), and the
    variants of the directory (a) and (b) read."""
    mask = torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX)
    g, lw, lt = gpt2_weights(1), llama_weights(2, False), llama_weights(3, True)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, DIM // HEADS, 2).float() / (DIM // HEADS)))
    return [
        ("gpt2", gpt2_config(), g, lambda w, win: gpt2_loss(w, win, SEQ), {
            "f32": dict(dtype="F32", extra=[("transformer.h.0.attn.bias", mask),
                                            ("lm_head.weight", g["transformer.wte.weight"])]),
            "bf16": dict(dtype="BF16"), "f16": dict(dtype="F16"),
            "sharded": dict(dtype="F32", shards=2)}),
        ("llama", llama_config(), lw, lambda w, win: llama_loss(w, win, SEQ, 0), {
            "f32": dict(dtype="F32",
                        extra=[("model.layers.0.self_attn.rotary_emb.inv_freq", inv_freq)]),
            "bf16": dict(dtype="BF16"), "sharded": dict(dtype="F32", shards=2)}),
        ("llama-tied", llama_config(tie_word_embeddings=True), lt,
         lambda w, win: llama_loss(w, win, SEQ, 1), {"f32": dict(dtype="F32")}),
    ]


class Checks:
    """The checks' counts, and weft-train run on 1 or more ranks."""

    def __init__(self):
        build = os.environ.get("BUILD", "build")
        self.weftrun, self.tool = os.path.join(build, "weftrun"), os.path.join(build, "weft-train")
        self.env = dict(os.environ, **ENV)
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
        self.passed, self.failed = self.passed + bool(ok), self.failed + (not ok)

    def train(self, args, ranks=1):
        launch = [self.weftrun, "-n", str(ranks), self.tool] if ranks > 1 else [self.tool]
        return subprocess.run(launch + args, capture_output=True, text=True, timeout=300,
                              env=self.env)

    def summary(self):
        print(f"checks: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def in_and_out(c, name, a, w, config, kw, common, loss, windows):
    """(a) and (b): directory a written from w, read with --init-from,
    evaluated and exported again: the tensors bit for bit (as f32), the
    config's keys, the validation loss against the reference's."""
    b, csv = a + ".out", a + ".csv"
    write_dir(a, w, config, **kw)
    r = c.train(common + ["--init-from", a, "--steps", "0", "--export", b, "--metrics", csv])
    c.check(f"{name}: --init-from --steps 0 --export runs", r.returncode == 0, r.stdout + r.stderr)
    if r.returncode != 0:
        return
    out = st_read(os.path.join(b, "model.safetensors"))
    fl = DTYPES[kw["dtype"]][0]
    want = {k: v.to(fl).to(torch.float64) for k, v in w.items()}
    same = set(out) == set(want) and all(
        out[k][1] == "F32" and out[k][0].shape == want[k].shape and
        torch.equal(out[k][0], want[k]) for k in want)
    c.check(f"{name}: exported tensors equal the input's bit for bit (f32)", same,
            f"{sorted(set(out) ^ set(want))[:4]}")
    with open(os.path.join(b, "config.json")) as f:
        cj = json.load(f)
    c.check(f"{name}: exported config.json",
            all(cj[k] == v for k, v in config.items() if k != "n_ctx"), str(cj))
    ref, got = loss(want, windows), val_loss(csv)
    c.check(f"{name}: loaded model's validation loss {got} = reference {ref:.6f}",
            got is not None and abs(got - ref) < 1e-5)


def trained(c, name, a, w, b, ranks, args, loss, windows):
    """(c): trained from directory a on ranks, exported to b: every tensor
    moved, and the export's reference loss is the one weft evaluated."""
    csv = b + ".csv"
    r = c.train(args + ["--init-from", a, "--export", b, "--metrics", csv], ranks)
    c.check(f"{name}: train 3 steps from --init-from, --export", r.returncode == 0,
            r.stdout + r.stderr)
    if r.returncode != 0:
        return
    out = {k: v for k, (v, _) in st_read(os.path.join(b, "model.safetensors")).items()}
    moved = all(not torch.equal(out[k], w[k].to(torch.float64)) for k in w)
    ref, got = loss(out, windows), val_loss(csv)
    c.check(f"{name}: every tensor moved; the exported model's reference loss "
            f"{ref:.6f} = weft's {got}", moved and got is not None and abs(got - ref) < 1e-5)


def main():
    c = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, VOCAB, (4000,), generator=g).tolist()
        data = os.path.join(tmp, "toks.bin")
        tokshard(data, tokens, VOCAB)
        windows = val_windows(tokens, SEQ)
        common = ["--data", data, "--seq", str(SEQ), "--threads", "1", "--quiet"]
        for fam, config, w, loss, variants in families():
            for name, kw in variants.items():
                in_and_out(c, f"{fam} {name}", os.path.join(tmp, f"{fam}-{name}"), w, config,
                           kw, common, loss, windows)
            a = os.path.join(tmp, f"{fam}-f32")
            steps = ["--steps", "3", "--batch", "8", "--lr", "0.01", "--warmup", "0"]
            for label, ranks, extra in (("1 process", 1, []),
                                        ("dp 2 with ZeRO-3", 2, ["--zero", "3"]),
                                        ("tp 2 x pp 2", 4, ["--tp", "2", "--pp", "2"])):
                trained(c, f"{fam} {label}", a, w, os.path.join(tmp, f"{fam}-trained{ranks}"),
                        ranks, common + steps + extra, loss, windows)

        # refusals, each naming its cause
        gw, lw = families()[0][2], families()[1][2]
        cases = {
            "layer_norm_epsilon": (gpt2_config(layer_norm_epsilon=1e-6), gw, []),
            "activation_function": (gpt2_config(activation_function="relu"), gw, []),
            "disagrees": (gpt2_config(), gw, ["--model", "gpt", "--dim", "64"]),
            "no tensor": (gpt2_config(n_layer=3), gw, []),
            "rope_scaling": (llama_config(rope_scaling={"type": "linear", "factor": 2.0}), lw,
                             []),
            "attention_bias": (llama_config(attention_bias=True), lw, []),
            "hidden_act": (llama_config(hidden_act="gelu"), lw, []),
            "not part of weft's model": (llama_config(), dict(lw, **{
                "model.layers.0.self_attn.q_proj.bias": torch.zeros(DIM)}), []),
        }
        for why, (cfg, weights, more) in cases.items():
            d = os.path.join(tmp, "bad-" + why.replace(" ", "-").replace("'", ""))
            write_dir(d, weights, cfg)
            r = c.train(common + more + ["--init-from", d, "--steps", "0"])
            c.check(f"refused: {why}", r.returncode != 0 and why in r.stderr + r.stdout,
                    r.stdout + r.stderr)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
