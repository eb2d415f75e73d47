"""Hugging Face weights in and out (--init-from, --export) against a
plain-torch GPT2LMHeadModel written here: a tiny GPT-2 directory is built
by hand (config.json and safetensors bytes from struct and json, in f32,
bf16, f16 and as two shards with model.safetensors.index.json), then
  (a) weft-train --init-from A --steps 0 --export B gives A's tensors bit
      for bit (as f32; transformers' names, shapes and Conv1D layouts);
  (b) the reference's loss on the validation windows equals the loss weft
      evaluates for the loaded model (1e-5);
  (c) after a few training steps, at 1 process and at tp 2 x pp 2 under
      weftrun, the exported model's loss in the reference equals the loss
      weft evaluated at the end (1e-5);
and what weft cannot represent is refused with a message naming it."""
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


def main():
    build = os.environ.get("BUILD", "build")
    weftrun, tool = os.path.join(build, "weftrun"), os.path.join(build, "weft-train")
    env = dict(os.environ, **ENV)
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
        passed, failed = passed + bool(ok), failed + (not ok)

    def train(args, ranks=1):
        launch = [weftrun, "-n", str(ranks), tool] if ranks > 1 else [tool]
        return subprocess.run(launch + args, capture_output=True, text=True, timeout=300,
                              env=env)

    with tempfile.TemporaryDirectory() as tmp:
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, VOCAB, (4000,), generator=g).tolist()
        data = os.path.join(tmp, "toks.bin")
        tokshard(data, tokens, VOCAB)
        windows = val_windows(tokens, SEQ)
        common = ["--data", data, "--seq", str(SEQ), "--threads", "1", "--quiet"]
        w = gpt2_weights(1)
        mask = torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX)
        variants = {
            "f32": dict(dtype="F32", extra=[("transformer.h.0.attn.bias", mask),
                                            ("lm_head.weight", w["transformer.wte.weight"])]),
            "bf16": dict(dtype="BF16"), "f16": dict(dtype="F16"),
            "sharded": dict(dtype="F32", shards=2),
        }
        for name, kw in variants.items():
            a, b = os.path.join(tmp, name), os.path.join(tmp, name + ".out")
            write_dir(a, w, gpt2_config(), **kw)
            csv = os.path.join(tmp, name + ".csv")
            r = train(common + ["--init-from", a, "--steps", "0", "--export", b,
                                "--metrics", csv])
            check(f"{name}: --init-from --steps 0 --export runs", r.returncode == 0,
                  r.stdout + r.stderr)
            if r.returncode != 0:
                continue
            out = st_read(os.path.join(b, "model.safetensors"))
            fl = DTYPES[kw["dtype"]][0]
            want = {k: v.to(fl).to(torch.float64) for k, v in w.items()}
            same = set(out) == set(want) and all(
                out[k][1] == "F32" and out[k][0].shape == want[k].shape and
                torch.equal(out[k][0], want[k]) for k in want)
            check(f"{name}: exported tensors equal the input's bit for bit (f32)", same,
                  f"{sorted(set(out) ^ set(want))}")
            with open(os.path.join(b, "config.json")) as f:
                cj = json.load(f)
            check(f"{name}: exported config.json", cj["architectures"] == ["GPT2LMHeadModel"] and
                  all(cj[k] == v for k, v in gpt2_config().items() if k != "n_ctx"), str(cj))
            ref, got = gpt2_loss(want, windows, SEQ), val_loss(csv)
            check(f"{name}: loaded model's validation loss {got} = reference {ref:.6f}",
                  got is not None and abs(got - ref) < 1e-5)

        # (c) training, then the exported model in the reference
        a = os.path.join(tmp, "f32")
        steps = ["--steps", "3", "--batch", "8", "--lr", "0.01", "--warmup", "0"]
        for label, ranks, extra in (("1 process", 1, []),
                                    ("tp 2 x pp 2", 4, ["--tp", "2", "--pp", "2"])):
            b, csv = os.path.join(tmp, f"trained{ranks}"), os.path.join(tmp, f"trained{ranks}.csv")
            r = train(common + steps + extra + ["--init-from", a, "--export", b,
                                                 "--metrics", csv], ranks)
            check(f"{label}: train 3 steps from --init-from, --export", r.returncode == 0,
                  r.stdout + r.stderr)
            if r.returncode != 0:
                continue
            out = {k: v for k, (v, _) in st_read(os.path.join(b, "model.safetensors")).items()}
            moved = not torch.equal(out["transformer.h.0.attn.c_attn.weight"],
                                    w["transformer.h.0.attn.c_attn.weight"].to(torch.float64))
            ref, got = gpt2_loss(out, windows, SEQ), val_loss(csv)
            check(f"{label}: weights moved; the exported model's reference loss {ref:.6f} = "
                  f"weft's {got}", moved and got is not None and abs(got - ref) < 1e-5)

        # refusals, each naming its cause
        cases = {
            "layer_norm_epsilon": (gpt2_config(layer_norm_epsilon=1e-6), []),
            "activation_function": (gpt2_config(activation_function="relu"), []),
            "disagrees": (gpt2_config(), ["--model", "gpt", "--dim", "64"]),
            "no tensor": (gpt2_config(n_layer=3), []),
        }
        for why, (cfg, more) in cases.items():
            d = os.path.join(tmp, "bad-" + why.replace(" ", "-"))
            write_dir(d, w, cfg)
            r = train(common + more + ["--init-from", d, "--steps", "0"])
            check(f"refused: {why}", r.returncode != 0 and why in r.stderr + r.stdout,
                  r.stdout + r.stderr)
    print(f"checks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
