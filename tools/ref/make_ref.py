#!/usr/bin/python3
"""Writes the PyTorch reference files the training-engine tests compare with.

Run with Debian's python3-torch (it installs into /usr/bin/python3):
    /usr/bin/python3 tools/ref/make_ref.py tests/ref
Produces tests/ref/mlp.wref and tests/ref/gpt.wref. The tests need no Python.

File format (.wref), all little-endian:
    8 bytes   magic "WREF0001"
    u32       number of entries
    per entry:
      u32     name length, then the name (ASCII, no terminator)
      u32     dtype: 0 = float32, 1 = int32
      u32     ndim (0..4), then ndim u32 dims
      data    prod(dims) elements (1 when ndim is 0)

Entries for a model with prefix P ("mlp" or "gpt"):
    P.config            int32: the weft_model_config fields that matter
                        (mlp: n_widths, widths..., activation;
                         gpt: vocab, ctx, n_layer, n_head, d_model)
    P.x, P.y            inputs (float32 rows or int32 tokens) and targets
                        (int32; -1 = ignored), P.shape int32 [batch, seq]
    P.init.NAME         initial value of every parameter, in weft's names
    P.logits, P.loss    forward results at the initial weights
    P.grad.NAME         d(mean loss)/d(parameter) at the initial weights
    P.sgd.hparams       float32 [lr, momentum, nesterov, weight_decay]
    P.sgd.losses        float32[10]: loss before each of 10 steps on (x, y)
    P.sgd.final.NAME    parameters after the 10 steps
    P.adamw.hparams     float32 [lr, beta1, beta2, eps, weight_decay]
    P.adamw.losses, P.adamw.final.NAME   the same for AdamW
"""
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)


class MLP(nn.Module):
    def __init__(self, widths, act):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.act = act

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x) if self.act == 0 else F.gelu(x, approximate="tanh")
        return x


class Attn(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.nh = nh

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLPBlock(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.attn = Attn(C, nh)
        self.ln2 = nn.LayerNorm(C)
        self.mlp = MLPBlock(C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, n_layer, n_head, C):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, C)
        self.pos_emb = nn.Embedding(ctx, C)
        self.blocks = nn.ModuleList(Block(C, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.tok_emb.weight.t()


def gpt_init(model, n_layer):
    # GPT-2 style, with non-trivial LayerNorm parameters and biases so that
    # their gradients are tested with values other than 1 and 0
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer) * 10)
            elif "ln" in name and name.endswith("weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith("bias"):
                p.uniform_(-0.05, 0.05)
            else:
                p.normal_(0.0, 0.3)


class Writer:
    def __init__(self):
        self.entries = []

    def add(self, name, t, dtype=0):
        t = torch.as_tensor(t).detach().contiguous()
        t = t.to(torch.float32 if dtype == 0 else torch.int32)
        self.entries.append((name, dtype, list(t.shape), t.numpy().tobytes()))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"WREF0001")
            f.write(struct.pack("<I", len(self.entries)))
            for name, dtype, dims, data in self.entries:
                nb = name.encode()
                f.write(struct.pack("<I", len(nb)) + nb)
                f.write(struct.pack("<II", dtype, len(dims)))
                f.write(struct.pack("<%dI" % len(dims), *dims))
                f.write(data)


def loss_of(model, x, y):
    logits = model(x)
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                   ignore_index=-1)


def record(w, prefix, model, x, y):
    for name, p in model.named_parameters():
        w.add(prefix + ".init." + name, p)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    logits, loss = loss_of(model, x, y)
    loss.backward()
    w.add(prefix + ".logits", logits.reshape(-1, logits.shape[-1]))
    w.add(prefix + ".loss", loss.reshape(1))
    for name, p in model.named_parameters():
        w.add(prefix + ".grad." + name, p.grad)

    runs = [
        ("sgd", [0.05, 0.9, 0.0, 1e-3],
         lambda ps, h: torch.optim.SGD(ps, lr=h[0], momentum=h[1], nesterov=bool(h[2]),
                                       weight_decay=h[3])),
        # eps 1e-5, not 1e-8: some gradients are exactly zero in theory
        # (the key bias: softmax ignores a constant shift) and rounding noise
        # of 1e-9 over eps 1e-8 would make their updates a coin toss
        ("adamw", [1e-2, 0.9, 0.95, 1e-5, 0.1],
         lambda ps, h: torch.optim.AdamW(ps, lr=h[0], betas=(h[1], h[2]), eps=h[3],
                                         weight_decay=h[4])),
    ]
    for tag, h, make in runs:
        model.load_state_dict(init)
        opt = make(model.parameters(), h)
        losses = []
        for _ in range(10):
            opt.zero_grad()
            _, loss = loss_of(model, x, y)
            loss.backward()
            losses.append(loss.item())
            opt.step()
        w.add(prefix + "." + tag + ".hparams", torch.tensor(h))
        w.add(prefix + "." + tag + ".losses", torch.tensor(losses))
        for name, p in model.named_parameters():
            w.add(prefix + "." + tag + ".final." + name, p)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/ref"

    torch.manual_seed(1234)
    widths, act, B = [12, 16, 10, 5], 0, 6
    mlp = MLP(widths, act)
    x = torch.randn(B, widths[0])
    y = torch.randint(0, widths[-1], (B,))
    w = Writer()
    w.add("mlp.config", [len(widths)] + widths + [act], 1)
    w.add("mlp.shape", [B, 1], 1)
    w.add("mlp.x", x)
    w.add("mlp.y", y, 1)
    record(w, "mlp", mlp, x, y)
    w.write(out + "/mlp.wref")

    torch.manual_seed(4321)
    V, ctx, L, NH, C, B, T = 23, 8, 2, 2, 16, 2, 7
    gpt = GPT(V, ctx, L, NH, C)
    gpt_init(gpt, L)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    y[1, 3] = -1
    w = Writer()
    w.add("gpt.config", [V, ctx, L, NH, C], 1)
    w.add("gpt.shape", [B, T], 1)
    w.add("gpt.x", x, 1)
    w.add("gpt.y", y, 1)
    record(w, "gpt", gpt, x, y)
    w.write(out + "/gpt.wref")


if __name__ == "__main__":
    main()
