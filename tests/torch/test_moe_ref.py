"""weft's mixture-of-experts Llama against a plain-torch reimplementation
(written from the conventions in docs/TRAINING.md, not from weft's code):
from weft's initial weights, the loss and every parameter's gradient of
cross-entropy + aux * sum(aux loss) + zloss * sum(z-loss) within 1e-5
relative; softmax and sigmoid routers, without and with token dropping,
shared experts, a balancing bias that steers selection, an expert that
gets no token; the counters (routed, dropped, aux, z) and the bias's
step after backward (bias + 1e-3 * sign(mean load - load))."""
import ctypes
import math
import sys

import torch

import weft.model
from weft._lib import lib

SPECS = [
    # (spec, bias per expert before the step or None)
    ("llama:vocab=53,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=40,experts=4,topk=2,"
     "aux=0.01,zloss=0.001", None),
    ("llama:vocab=53,ctx=16,layers=2,heads=4,dim=32,ffn=40,experts=4,topk=2,capacity=1,"
     "shared=1,moe_ffn=24,aux=0.02", None),
    ("llama:vocab=53,ctx=16,layers=1,heads=2,dim=16,ffn=24,experts=6,topk=3,router=sigmoid,"
     "bias=1,capacity=1.25,aux=0.01,zloss=0.01", [0.3, 0.0, -0.2, 0.0, 0.1, 0.0]),
    # expert 3 never picked: it gets no token
    ("llama:vocab=53,ctx=16,layers=1,heads=2,dim=16,ffn=24,experts=4,topk=1,bias=1,"
     "tied=1,aux=0.01", [0.0, 0.0, 0.0, -10.0]),
]
B, T = 3, 16


class Stats(ctypes.Structure):
    _fields_ = [("routed", ctypes.c_int64), ("dropped", ctypes.c_int64),
                ("load_max", ctypes.c_double), ("load_mean", ctypes.c_double),
                ("aux", ctypes.c_double), ("z", ctypes.c_double)]


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(hd, seq, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(seq).float()
    freqs = (inv_freq[None, :, None] @ pos[None, None, :]).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def attention(x, w, cfg, cos, sin, mask):
    H, G, D = cfg["heads"], cfg["kv_heads"], cfg["dim"]
    hd, (b, t, _) = D // H, x.shape
    h = rms_norm(x, w("attn_norm"), cfg["eps"])
    q = (h @ w("attn.q").T).view(b, t, H, hd).transpose(1, 2)
    k = (h @ w("attn.k").T).view(b, t, G, hd).transpose(1, 2)
    v = (h @ w("attn.v").T).view(b, t, G, hd).transpose(1, 2)
    q = (q * cos) + (rotate_half(q) * sin)
    k = (k * cos) + (rotate_half(k) * sin)
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    att = torch.softmax(q @ k.transpose(2, 3) * hd ** -0.5 + mask, dim=-1)
    return x + (att @ v).transpose(1, 2).reshape(b, t, D) @ w("attn.o").T


def swiglu(h, gu, f):
    z = h @ gu.T
    return torch.nn.functional.silu(z[..., :f]) * z[..., f:]


def capacity(n, cfg):
    c = torch.tensor(cfg["capacity"], dtype=torch.float32).item()  # the float weft stores
    if c <= 0:
        return n
    return min(n, max(1, math.ceil(n * cfg["topk"] * c / cfg["experts"])))


def moe(h, p, i, cfg, bias, rec):
    """The experts' combined output for h [N, D]; rec collects the counters."""
    N, D = h.shape
    E, K, F = cfg["experts"], cfg["topk"], cfg["moe_ffn"] or cfg["ffn"]
    logits = h @ p[f"blocks.{i}.mlp.router.weight"].T
    s = torch.sigmoid(logits) if cfg["router"] == "sigmoid" else torch.softmax(logits, -1)
    key = s.detach() + (bias if bias is not None else 0.0)
    # the k best, ties to the lower expert
    sel = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :K]
    picked = s.gather(1, sel)
    gate = picked / picked.sum(-1, keepdim=True)
    cap, used = capacity(N, cfg), [0] * E
    picks = torch.bincount(sel.flatten(), minlength=E).float()
    gu = p[f"blocks.{i}.mlp.experts.gate_up.weight"].view(E, 2 * F, D)
    dn = p[f"blocks.{i}.mlp.experts.down.weight"].view(E, D, F)
    rows, dropped = [], 0
    for t in range(N):
        acc = torch.zeros(D)
        for j in range(K):
            e = int(sel[t, j])
            if used[e] >= cap:
                dropped += 1
                continue
            used[e] += 1
            acc = acc + gate[t, j] * (swiglu(h[t], gu[e], F) @ dn[e].T)
        rows.append(acc)
    q = s / s.sum(-1, keepdim=True) if cfg["router"] == "sigmoid" else s
    aux = E * ((picks / (N * K)) * q.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    rec["picks"].append(picks)
    rec["dropped"] += dropped
    rec["aux"] += aux.item()
    rec["z"] += z.item()
    return torch.stack(rows), aux, z


def forward(p, cfg, tokens, biases, rec):
    L, H, D = cfg["layers"], cfg["heads"], cfg["dim"]
    b, t = tokens.shape
    x = p["tok_emb.weight"][tokens]
    cos, sin = rope_cos_sin(D // H, t, cfg["theta"])
    cos, sin = cos[:, None], sin[:, None]
    mask = torch.full((t, t), float("-inf")).triu(1)
    extra = torch.zeros(())
    for i in range(L):
        w = lambda n: p[f"blocks.{i}.{n}.weight"]
        x = attention(x, w, cfg, cos, sin, mask)
        h = rms_norm(x, w("mlp_norm"), cfg["eps"]).reshape(b * t, D)
        y, aux, z = moe(h, p, i, cfg, biases[i], rec)
        if cfg["shared"]:
            f = cfg["shared"] * (cfg["moe_ffn"] or cfg["ffn"])
            gu = torch.cat((w("shared_mlp.gate"), w("shared_mlp.up")))
            y = y + swiglu(h, gu, f) @ w("shared_mlp.down").T
        x = x + y.view(b, t, D)
        extra = extra + cfg["aux"] * aux + cfg["zloss"] * z
    x = rms_norm(x, p["norm.weight"], cfg["eps"])
    head = p["tok_emb.weight"] if cfg["tied"] else p["lm_head.weight"]
    return x @ head.T, extra


def parse(spec):
    kv = dict(item.split("=") for item in spec.split(":", 1)[1].split(","))
    cfg = {k: int(kv[k]) for k in ("vocab", "ctx", "layers", "heads", "dim", "ffn", "experts",
                                   "topk")}
    cfg["kv_heads"] = int(kv.get("kv_heads", cfg["heads"]))
    for k in ("moe_ffn", "shared", "bias", "tied"):
        cfg[k] = int(kv.get(k, 0))
    for k in ("capacity", "aux", "zloss"):
        cfg[k] = float(kv.get(k, 0))
    cfg["theta"], cfg["eps"] = 10000.0, 1e-5
    cfg["router"] = kv.get("router", "softmax")
    return cfg


def weft_tensors(m, buf):
    flat = torch.frombuffer(buf, dtype=torch.float32)
    out = {}
    for name, off, shape in m.tensors():
        out[name] = flat[off:off + math.prod(shape)].view(*shape).clone()
    return out


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def one(spec, bias0, check):
    cfg = parse(spec)
    m = weft.model.Model(spec, seed=7)
    flat = torch.frombuffer(m.params(), dtype=torch.float32)
    offs = {name: off for name, off, _ in m.tensors()}
    biases = []
    for i in range(cfg["layers"]):
        if bias0 is None:
            biases.append(None)
            continue
        b = torch.tensor(bias0, dtype=torch.float32)
        off = offs[f"blocks.{i}.mlp.router.bias"]
        flat[off:off + cfg["experts"]] = b   # weft's own buffer
        biases.append(b)
    p = {k: v.requires_grad_() for k, v in weft_tensors(m, m.params()).items()}
    gen = torch.Generator().manual_seed(11)
    seq = torch.randint(0, cfg["vocab"], (B, T + 1), generator=gen)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    loss_w = m.forward(x.flatten().tolist(), y.flatten().tolist(), B, T)
    m.zero_grad()
    m.backward()
    grads_w = weft_tensors(m, m.grads())
    after = weft_tensors(m, m.params())

    rec = {"picks": [], "dropped": 0, "aux": 0.0, "z": 0.0}
    logits, extra = forward(p, cfg, x, biases, rec)
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.flatten())
    (ce + extra).backward()
    check(f"{spec}: loss", abs(loss_w - ce.item()) <= 1e-5 * ce.item(), f"{loss_w} vs {ce.item()}")
    names = [n for n in p if not n.endswith("router.bias")]
    worst = max((rel(grads_w[n], p[n].grad), n) for n in names)
    check(f"{spec}: every gradient (worst {worst[1]} {worst[0]:.2g})", worst[0] < 1e-5)
    zero = [n for n in p if n.endswith("router.bias") and grads_w[n].abs().max() != 0]
    check(f"{spec}: the bias gets no gradient", not zero, f"{zero}")

    st = Stats()
    rc = lib.weft_model_moe_stats(m._h, ctypes.byref(st))
    n_pairs = B * T * cfg["topk"] * cfg["layers"]
    check(f"{spec}: counters", rc == 0 and st.routed == n_pairs and st.dropped == rec["dropped"]
          and abs(st.aux - rec["aux"]) <= 1e-5 * max(1.0, rec["aux"])
          and abs(st.z - rec["z"]) <= 1e-5 * max(1.0, rec["z"]),
          f"rc {rc} routed {st.routed}/{n_pairs} dropped {st.dropped}/{rec['dropped']} "
          f"aux {st.aux}/{rec['aux']} z {st.z}/{rec['z']}")
    if "capacity=1," in spec:
        check(f"{spec}: some tokens dropped", rec["dropped"] > 0)
    if bias0 is not None:
        ok = True
        for i in range(cfg["layers"]):
            load = rec["picks"][i]
            step = torch.sign(load.mean() - load) * torch.tensor(1e-3, dtype=torch.float32)
            want = biases[i] + step
            ok = ok and torch.equal(after[f"blocks.{i}.mlp.router.bias"], want)
        check(f"{spec}: the bias's step toward the mean load", ok)
    if bias0 is not None and bias0[-1] < -1:
        check(f"{spec}: an expert with no token", rec["picks"][0][-1].item() == 0)
    m.close()


def main():
    torch.manual_seed(0)
    lib.weft_model_moe_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(Stats)]
    lib.weft_model_moe_stats.restype = ctypes.c_int
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
        passed, failed = passed + bool(ok), failed + (not ok)

    for spec, bias in SPECS:
        one(spec, bias, check)
    print(f"checks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
