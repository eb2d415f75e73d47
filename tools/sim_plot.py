#!/usr/bin/python3
"""Plots docs/sim/summit.dat (from `weft-sim figure summit`) and
docs/sim/gpt3.txt (from `weft-sim figure gpt3`) into PNGs.

usage: sim_plot.py DIR     (reads and writes DIR/summit.dat, DIR/summit.png,
                            DIR/gpt3.txt, DIR/gpt3.png)
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def columns(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            rows.append(line.split())
    return rows


def summit(d):
    rows = columns(d + "/summit.dat")
    g = [int(r[0]) for r in rows]
    ring8, tree8 = [float(r[2]) for r in rows], [float(r[3]) for r in rows]
    ring64, tree64 = [float(r[5]) for r in rows], [float(r[6]) for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.loglog(g, [x / 1e3 for x in ring8], "o-", label="ring (weft-sim)")
    a.loglog(g, [x / 1e3 for x in tree8], "s-", label="double binary tree (weft-sim)")
    a.plot([24576], [44], "x", color="C0", ms=11, mew=2, label="NCCL 2.3 ring, published: ~44 ms")
    a.plot([24576], [0.24], "x", color="C1", ms=11, mew=2,
           label="NCCL 2.4 tree, published: ~0.24 ms")
    a.set_xlabel("GPUs (6 per node)")
    a.set_ylabel("all-reduce latency, 8 bytes (ms)")
    a.set_title("Summit: 8 B all-reduce latency")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
    b.semilogx(g, ring64, "o-", label="ring (weft-sim)")
    b.semilogx(g, tree64, "s-", label="double binary tree (weft-sim)")
    b.plot([24576], [2], "x", color="C0", ms=11, mew=2, label="NCCL ring, published: ~2 GB/s")
    b.plot([24576], [12], "x", color="C1", ms=11, mew=2, label="NCCL tree, published: ~12 GB/s")
    b.set_xlabel("GPUs (6 per node)")
    b.set_ylabel("bus bandwidth, 64 MB (GB/s)")
    b.set_title("Summit: 64 MB all-reduce bus bandwidth")
    b.set_ylim(0, 27)
    b.grid(True, which="both", alpha=0.3)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d + "/summit.png", dpi=110)


def gpt3(d):
    names, secs = [], []
    with open(d + "/gpt3.txt") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            if line.split()[0].startswith(("dp-", "tp-", "pp-")):
                break
            names.append(line.split()[0])
            secs.append(float(line.split()[1]))
    fig, a = plt.subplots(figsize=(7, 3.6))
    a.barh(names, secs, color=["C0", "C1", "C2", "C3", "C3", "C3"][: len(names)])
    a.set_xscale("log")
    a.set_xlabel("seconds per all-reduce of 700 GB (log scale)")
    a.set_title("GPT-3 gradients, 128 replicas, 800 Gb/s links (weft-sim)")
    for i, s in enumerate(secs):
        a.text(s * 1.1, i, "%.1f s" % s, va="center", fontsize=8)
    a.invert_yaxis()
    a.set_xlim(1, max(secs) * 8)
    fig.tight_layout()
    fig.savefig(d + "/gpt3.png", dpi=110)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/sim"
    summit(out)
    gpt3(out)
