"""A Llama with experts in and out as transformers' Mixtral, against a
plain-torch MixtralForCausalLM forward written here from transformers'
modeling semantics (MixtralSparseMoeBlock: a softmax over every expert,
the top k kept and renormalised, each expert w2(silu(w1 x) * w3 x)
weighted and summed; the attention is test_llama_ref.py's): a Mixtral
directory built by hand (f32, and bf16 in two shards that split a
layer's experts between the files) gives back its tensors bit for bit
through --init-from --steps 0 --export, and the reference's loss on the
validation windows equals weft's (1e-5); after a few training steps at
1 process and at ep 2 (each rank exporting its own experts) the exported
model's reference loss equals the loss weft evaluated at the end."""
import os
import sys
import tempfile

import torch

from test_hf import Checks, in_and_out, tokshard, trained, val_windows
from test_llama_ref import repeat_kv, rms_norm, rope_cos_sin, rotate_half

VOCAB, CTX, DIM, LAYERS, HEADS, KV, FFN, EXPERTS, TOPK, SEQ = 64, 32, 32, 2, 4, 2, 24, 4, 2, 16


def mixtral_config():
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "vocab_size": VOCAB, "hidden_size": DIM, "intermediate_size": FFN,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "max_position_embeddings": CTX, "rope_theta": 10000.0,
            "rms_norm_eps": 1e-5, "hidden_act": "silu", "sliding_window": None,
            "num_local_experts": EXPERTS, "num_experts_per_tok": TOPK,
            "router_aux_loss_coef": 0.0, "tie_word_embeddings": False}


def mixtral_weights(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    w = {"model.embed_tokens.weight": r(VOCAB, DIM), "model.norm.weight": 1 + r(DIM),
         "lm_head.weight": r(VOCAB, DIM)}
    hd = DIM // HEADS
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + r(DIM),
                  p + "post_attention_layernorm.weight": 1 + r(DIM),
                  p + "self_attn.q_proj.weight": r(DIM, DIM),
                  p + "self_attn.k_proj.weight": r(KV * hd, DIM),
                  p + "self_attn.v_proj.weight": r(KV * hd, DIM),
                  p + "self_attn.o_proj.weight": r(DIM, DIM),
                  p + "block_sparse_moe.gate.weight": r(EXPERTS, DIM) * 4})
        for e in range(EXPERTS):
            q = p + f"block_sparse_moe.experts.{e}."
            w.update({q + "w1.weight": r(FFN, DIM), q + "w3.weight": r(FFN, DIM),
                      q + "w2.weight": r(DIM, FFN)})
    return w


def sparse_block(w, p, h):
    """MixtralSparseMoeBlock.forward on h [n, D]."""
    logits = h @ w(p + "gate").T
    weights = torch.softmax(logits, dim=1, dtype=torch.float32)
    weights, selected = torch.topk(weights, TOPK, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    mask = torch.nn.functional.one_hot(selected, num_classes=EXPERTS).permute(2, 1, 0)
    for e in range(EXPERTS):
        idx, top = torch.where(mask[e])
        x = h[top]
        q = p + f"experts.{e}."
        y = (torch.nn.functional.silu(x @ w(q + "w1").T) * (x @ w(q + "w3").T)) @ w(q + "w2").T
        out.index_add_(0, top, y * weights[top, idx, None])
    return out


def mixtral_loss(weights, tokens):
    p = {k: v.to(torch.float32) for k, v in weights.items()}
    w = lambda n: p[n + ".weight"]
    x_tok = torch.tensor([t[:-1] for t in tokens])
    y_tok = torch.tensor([t[1:] for t in tokens])
    b, t = x_tok.shape
    hd, eps = DIM // HEADS, 1e-5
    x = p["model.embed_tokens.weight"][x_tok]
    cos, sin = rope_cos_sin(hd, t, 10000.0)
    cos, sin = cos[:, None], sin[:, None]
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(LAYERS):
        a = f"model.layers.{i}.self_attn."
        h = rms_norm(x, w(f"model.layers.{i}.input_layernorm"), eps)
        q = (h @ w(a + "q_proj").T).view(b, t, HEADS, hd).transpose(1, 2)
        k = (h @ w(a + "k_proj").T).view(b, t, KV, hd).transpose(1, 2)
        v = (h @ w(a + "v_proj").T).view(b, t, KV, hd).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k, v = repeat_kv(k, HEADS // KV), repeat_kv(v, HEADS // KV)
        att = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask, dim=-1)
        x = x + torch.matmul(att, v).transpose(1, 2).reshape(b, t, DIM) @ w(a + "o_proj").T
        h = rms_norm(x, w(f"model.layers.{i}.post_attention_layernorm"), eps)
        x = x + sparse_block(w, f"model.layers.{i}.block_sparse_moe.",
                             h.reshape(-1, DIM)).view(b, t, DIM)
    logits = rms_norm(x, w("model.norm"), eps) @ w("lm_head").T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y_tok.reshape(-1)).item()


def main():
    c = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        g = torch.Generator().manual_seed(11)
        tokens = torch.randint(0, VOCAB, (4000,), generator=g).tolist()
        data = os.path.join(tmp, "toks.bin")
        tokshard(data, tokens, VOCAB)
        windows = val_windows(tokens, SEQ)
        common = ["--data", data, "--seq", str(SEQ), "--threads", "1", "--quiet",
                  "--eval-prompts", "0"]
        w = mixtral_weights(5)
        for name, kw in {"f32": dict(dtype="F32"),
                         "bf16 in two shards": dict(dtype="BF16", shards=2)}.items():
            in_and_out(c, name, os.path.join(tmp, "in-" + name.replace(" ", "-")), w,
                       mixtral_config(), kw, common, mixtral_loss, windows)
        steps = ["--steps", "3", "--batch", "8", "--lr", "0.01", "--warmup", "0"]
        for label, ranks, extra in (("1 process", 1, []), ("ep 2", 2, ["--ep", "2"])):
            trained(c, label, os.path.join(tmp, "in-f32"), w,
                    os.path.join(tmp, f"trained{ranks}"), ranks, common + steps + extra,
                    mixtral_loss, windows)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
