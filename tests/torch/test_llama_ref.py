"""weft's Llama against a plain-torch reimplementation of transformers'
LlamaForCausalLM forward (fp32: RMSNorm, rotate_half rotary embedding,
grouped-query causal attention with repeat_kv, SwiGLU MLP, no biases),
started from weft's initial weights (read through weft.model): the
logits and every parameter's gradient within 1e-5 relative (norm of the
difference over the norm), then 10 AdamW steps (weft's optimiser against
torch.optim.AdamW) whose losses agree within 1e-6 relative; a config with
kv_heads < heads, tied and untied."""
import math
import sys

import torch

import weft.model

SPECS = [
    "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88",
    "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,tied=1",
    "llama:vocab=61,ctx=12,layers=1,heads=4,kv_heads=1,dim=24,ffn=40,theta=500,eps=1e-6",
]
B, T = 3, 16


def rms_norm(x, w, eps):
    # LlamaRMSNorm: in fp32, then the weight
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(hd, seq, theta):
    # LlamaRotaryEmbedding, default rope type
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(seq).float()
    freqs = (inv_freq[None, :, None] @ pos[None, None, :]).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()   # [1, T, hd]


def repeat_kv(x, n_rep):
    b, g, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, g, n_rep, t, hd).reshape(b, g * n_rep, t, hd)


def llama_forward(p, cfg, tokens):
    """LlamaForCausalLM.forward's logits, from weft's tensor names."""
    L, H, G, D = cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["dim"]
    hd, eps = D // H, cfg["eps"]
    b, t = tokens.shape
    x = p["tok_emb.weight"][tokens]
    cos, sin = rope_cos_sin(hd, t, cfg["theta"])
    cos, sin = cos[:, None], sin[:, None]  # unsqueeze_dim=1
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(L):
        w = lambda n: p[f"blocks.{i}.{n}.weight"]
        h = rms_norm(x, w("attn_norm"), eps)
        q = (h @ w("attn.q").T).view(b, t, H, hd).transpose(1, 2)
        k = (h @ w("attn.k").T).view(b, t, G, hd).transpose(1, 2)
        v = (h @ w("attn.v").T).view(b, t, G, hd).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k, v = repeat_kv(k, H // G), repeat_kv(v, H // G)
        att = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask
        att = torch.softmax(att, dim=-1, dtype=torch.float32)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, D)
        x = x + y @ w("attn.o").T
        h = rms_norm(x, w("mlp_norm"), eps)
        g = torch.nn.functional.silu(h @ w("mlp.gate").T) * (h @ w("mlp.up").T)
        x = x + g @ w("mlp.down").T
    x = rms_norm(x, p["norm.weight"], eps)
    head = p["tok_emb.weight"] if cfg["tied"] else p["lm_head.weight"]
    return x @ head.T


def parse(spec):
    kv = dict(item.split("=") for item in spec.split(":", 1)[1].split(","))
    cfg = {k: int(kv[k]) for k in ("vocab", "ctx", "layers", "heads", "kv_heads", "dim", "ffn")}
    cfg["theta"] = float(kv.get("theta", 10000))
    cfg["eps"] = float(kv.get("eps", 1e-5))
    cfg["tied"] = int(kv.get("tied", 0))
    return cfg


def weft_tensors(m, buf):
    flat = torch.frombuffer(buf, dtype=torch.float32)
    out = {}
    for name, off, shape in m.tensors():
        n = math.prod(shape)
        out[name] = flat[off:off + n].view(*shape).clone()
    return out


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def batch(gen, vocab, t):
    seq = torch.randint(0, vocab, (B, t + 1), generator=gen)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def one(spec, check):
    cfg = parse(spec)
    t = min(T, cfg["ctx"])
    m = weft.model.Model(spec, seed=7)
    names = [n for n, _, _ in m.tensors()]
    want = ["tok_emb.weight"]
    for i in range(cfg["layers"]):
        want += [f"blocks.{i}.{n}.weight" for n in ("attn_norm", "attn.q", "attn.k", "attn.v",
                                                    "attn.o", "mlp_norm", "mlp.gate",
                                                    "mlp.up", "mlp.down")]
    want += ["norm.weight"] + ([] if cfg["tied"] else ["lm_head.weight"])
    check(f"{spec}: tensor names", names == want, f"{names}")
    p = {k: v.requires_grad_() for k, v in weft_tensors(m, m.params()).items()}
    gen = torch.Generator().manual_seed(11)
    x, y = batch(gen, cfg["vocab"], t)

    loss_w = m.forward(x.flatten().tolist(), y.flatten().tolist(), B, t)
    logits_w, cols = m.logits()
    logits_w = torch.frombuffer(logits_w, dtype=torch.float32).clone().view(B, t, cols)
    m.zero_grad()
    m.backward()
    grads_w = weft_tensors(m, m.grads())

    logits = llama_forward(p, cfg, x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.flatten())
    loss.backward()
    check(f"{spec}: logits", rel(logits_w, logits.detach()) < 1e-5,
          f"relative {rel(logits_w, logits.detach()):.3g}")
    check(f"{spec}: loss", abs(loss_w - loss.item()) <= 1e-5 * loss.item(),
          f"{loss_w} vs {loss.item()}")
    worst = max((rel(grads_w[n], p[n].grad), n) for n in names)
    check(f"{spec}: every parameter's gradient (worst {worst[1]} {worst[0]:.2g})",
          worst[0] < 1e-5)

    # 10 AdamW steps, each on a new batch
    ref = {k: v.detach().clone().requires_grad_() for k, v in weft_tensors(m, m.params()).items()}
    opt = torch.optim.AdamW(list(ref.values()), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    wopt = weft.model.AdamW(m, weight_decay=0.01)
    worst = 0.0
    for step in range(10):
        x, y = batch(gen, cfg["vocab"], t)
        lw = m.forward(x.flatten().tolist(), y.flatten().tolist(), B, t)
        m.zero_grad()
        m.backward()
        wopt.step(3e-3)
        opt.zero_grad()
        lt = torch.nn.functional.cross_entropy(
            llama_forward(ref, cfg, x).reshape(-1, cfg["vocab"]), y.flatten())
        lt.backward()
        opt.step()
        worst = max(worst, abs(lw - lt.item()) / lt.item())
    check(f"{spec}: 10 AdamW steps' losses (worst relative {worst:.2g})", worst < 1e-6)
    wopt.close()
    m.close()


def main():
    torch.manual_seed(0)
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
        passed, failed = passed + bool(ok), failed + (not ok)

    for spec in SPECS:
        one(spec, check)
    print(f"checks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
