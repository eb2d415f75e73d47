// The other side of tests/tokenizer/test_gpt2_oracle.sh and
// bench/tokenize.sh: js-tiktoken's "gpt2" encoding, installed by
// `make tokenizer-oracle` under the build folder.
//
//   node gpt2_oracle.mjs ORACLE corpus OUTDIR CHUNK BUDGET LIST...
//       text files named in each LIST (one path a line; .gz is unpacked),
//       BUDGET bytes shared among the lists (what a short one leaves goes
//       to the next), valid UTF-8 only, into OUTDIR/NNN.txt of about CHUNK
//       bytes each
//   node gpt2_oracle.mjs ORACLE encode FILE...    FILE.js.ids: its tokens, one a line
//   node gpt2_oracle.mjs ORACLE explain A.ids B.ids K
//       the tokens of both around index K, and their text
//   node gpt2_oracle.mjs ORACLE bench FILE ROUNDS  encode speed, MB/s
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { pathToFileURL } from "node:url";

const [oracle, mode, ...args] = process.argv.slice(2);
const lib = await import(pathToFileURL(path.join(oracle, "node_modules/js-tiktoken/dist/index.js")));
const enc = lib.getEncoding("gpt2");
const strict = new TextDecoder("utf-8", { fatal: true });

// encode_ordinary: no special token allowed, and none refused either
const encode = (text) => enc.encode(text, [], []);

function readText(p) {
  let bytes;
  try {
    bytes = fs.readFileSync(p);
    if (p.endsWith(".gz")) bytes = zlib.gunzipSync(bytes);
    return strict.decode(bytes);
  } catch {
    return null; // unreadable, or not UTF-8: js-tiktoken sees strings, not bytes
  }
}

function corpus(outdir, chunk, budget, lists) {
  fs.mkdirSync(outdir, { recursive: true });
  let parts = [], size = 0, n = 0, files = 0, skipped = 0, total = 0;
  const flush = () => {
    if (!parts.length) return;
    fs.writeFileSync(path.join(outdir, String(n++).padStart(3, "0") + ".txt"), parts.join(""));
    parts = []; size = 0;
  };
  for (const [i, list] of lists.entries()) {
    // what a short list leaves goes to the lists after it
    const each = Math.floor((budget - total) / (lists.length - i));
    let got = 0;
    for (const p of fs.readFileSync(list, "utf8").split("\n")) {
      if (!p || got >= each) continue;
      const text = readText(p);
      if (text == null || !text.length) { skipped++; continue; }
      const bytes = Buffer.byteLength(text);
      parts.push(text); size += bytes; got += bytes; total += bytes; files++;
      if (size >= chunk) flush();
    }
  }
  flush();
  console.log(`corpus: ${files} files, ${total} bytes in ${n} chunks (${skipped} not UTF-8 or empty, left out)`);
}

function explain(a, b, k) {
  const ta = fs.readFileSync(a, "utf8").split("\n").filter(Boolean).map(Number);
  const tb = fs.readFileSync(b, "utf8").split("\n").filter(Boolean).map(Number);
  for (const [name, t] of [[a, ta], [b, tb]]) {
    const s = t.slice(Math.max(0, k - 6), k + 6);
    console.log(`${name} [${Math.max(0, k - 6)}..]: ${s.join(" ")}`);
    console.log("    " + s.map((x) => JSON.stringify(enc.decode([x]))).join(" "));
  }
}

if (mode === "corpus") {
  corpus(args[0], Number(args[1]), Number(args[2]), args.slice(3));
} else if (mode === "encode") {
  for (const f of args) {
    const text = strict.decode(fs.readFileSync(f));
    const t = encode(text);
    fs.writeFileSync(f + ".js.ids", t.length ? t.join("\n") + "\n" : "");
  }
} else if (mode === "explain") {
  explain(args[0], args[1], Number(args[2]));
} else if (mode === "bench") {
  const text = strict.decode(fs.readFileSync(args[0]));
  const rounds = Number(args[1] || 1);
  encode(text.slice(0, 100000)); // compile the regex and warm the JIT
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (let r = 0; r < rounds; r++) n += encode(text).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`js-tiktoken: ${(Buffer.byteLength(text) * rounds / s / 1e6).toFixed(2)} MB/s (${n / rounds} tokens, ${s.toFixed(2)} s)`);
} else {
  console.error("usage: node gpt2_oracle.mjs ORACLE corpus|encode|explain|bench ...");
  process.exit(2);
}
