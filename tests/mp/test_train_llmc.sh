#!/bin/sh
# weft-train on llm.c token shards (written here by Python's struct, not by
# weft): --data llmc:DIR takes the _train shards for training and the _val
# shard for validation. A run stopped mid-epoch (inside a shard) and resumed
# from its checkpoint gives the uninterrupted run's losses and gradient
# norms row for row and ends with the same checkpoint byte for byte, on one
# rank and on two; resumed at another world size it gives them to fp32
# reduction-order tolerance (1e-4: the grad norm is printed to 6 digits).
# Llama 3 shards (uint32) train too; a shard named by path is recognised by
# its magic; a token past the model's vocabulary and a broken shard stop the
# run with a message that names the file and what is wrong. weft's own
# WEFTTOKS shards still train.
# TEST_TIMEOUT(300)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common="--model gpt:vocab=256,ctx=16,layers=1,heads=2,dim=32 --seq 16 --batch 8 --optim adamw --lr 0.003 --clip 1 --quiet"
. "$(dirname "$0")/train_lib.sh"

# three training shards of uneven length and one validation shard; tokens
# are the bytes of the README (below 256), the Llama 3 copy as uint32
python3 - "$dir" "$(dirname "$0")/../../README.md" <<'EOF' || { echo "FAIL python3 cannot write the shards"; exit 1; }
import os, struct, sys
out, src = sys.argv[1], sys.argv[2]
text = open(src, 'rb').read()[:12000]
def shard(path, toks, wide):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = (20240801, 7, len(toks)) if wide else (20240520, 1, len(toks))
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', *hdr))
        f.write(struct.pack('<%d%s' % (len(toks), 'I' if wide else 'H'), *toks))
cuts = [0, 3000, 7500, 10000, 12000]
for sub, wide in (('gpt2', False), ('llama3', True)):
    os.mkdir(os.path.join(out, sub))
    for k in range(3):
        shard(os.path.join(out, sub, 'tiny_train_%06d.bin' % (k + 1)), list(text[cuts[k]:cuts[k + 1]]), wide)
    shard(os.path.join(out, sub, 'tiny_val_000000.bin'), list(text[cuts[3]:]), wide)
# weft's own shard of the same bytes (WEFTTOKS, byte tokens, CRC-32s)
import zlib
hdr = bytearray(64)
hdr[0:8] = b'WEFTTOKS'
struct.pack_into('<IIIIQI', hdr, 8, 1, 64, 256, 1, len(text), zlib.crc32(text))
struct.pack_into('<I', hdr, 36, zlib.crc32(bytes(hdr[:36])))
open(os.path.join(out, 'own.tok'), 'wb').write(bytes(hdr) + text)
EOF

close() { # name ref tol: train rows of name (loss, grad norm as printed) are ref's,
          # exactly (tol 0) or to a relative tol
    if awk -F, -v name="$1" -v tol="$3" '
        function off(a, b,   d) { d = a - b; if (d < 0) d = -d; return tol == 0 ? a != b : d > tol * (b < 0 ? -b : b) + 1e-6 }
        FNR == 1 { next }
        $3 != "train" { next }
        NR == FNR { loss[$1] = $4; gn[$1] = $7; next }
        !($1 in loss) { print name ": step " $1 " not in the reference"; bad = 1; next }
        { checked++
          if (off($4, loss[$1]) || off($7, gn[$1])) { print name ": step " $1 ": " $4 ", " $7 " vs " loss[$1] ", " gn[$1]; bad = 1 } }
        END { if (checked < 10) { print name ": " checked " steps"; bad = 1 } exit bad }' \
        "$dir/$2.csv" "$dir/$1.csv"; then
        ok
    else
        bad "$1: not the losses of $2"
    fi
}

starts_at() { # name step: the resumed run's first row is that step
    if [ "$(sed -n 2p "$dir/$1.csv" | cut -d, -f1)" = "$2" ]; then ok; else bad "$1 did not go on at step $2"; fi
}

same_ckpt() {
    if cmp -s "$1" "$2"; then ok; else bad "$(basename "$1") and $(basename "$2") differ"; fi
}

# 624 training windows of 17 tokens (187, 281, 156 by shard): the stop after
# step 40 of batch 8 falls inside the first epoch, and the run goes on into
# the second
data="--data llmc:$dir/gpt2 --steps 90"
for n in 1 2; do
    run ref$n $n $data --save "$dir/ref$n.ckpt"
    run stop$n $n $data --stop-at 40 --save "$dir/stop$n.ckpt"
    if run resume$n $n $data --resume "$dir/stop$n.ckpt" --save "$dir/resume$n.ckpt"; then
        starts_at resume$n 41
        close resume$n ref$n 0
        same_ckpt "$dir/resume$n.ckpt" "$dir/ref$n.ckpt"
    fi
done
# stopped on one rank, resumed on two
run cross 2 $data --resume "$dir/stop1.ckpt" && close cross ref1 1e-4
# 2000 validation tokens: 124 windows of 17
if grep -q "validation: gpt2/val, 124 windows of 16 tokens" "$dir/ref1.out"; then ok; else
    bad "ref1 did not validate on the 124 windows of the _val shard"; sed 's/^/    /' "$dir/ref1.out"; fi

# Llama 3's layout; a training shard named alone, recognised by its magic,
# finds its validation shard by llm.c's naming
run llama 1 --data "llmc:$dir/llama3/tiny_train_*.bin" --steps 3
run bypath 1 --data "$dir/gpt2/tiny_train_000002.bin" --steps 3
# weft's own token shards are still read as before
run own 1 --data "$dir/own.tok" --steps 3
if grep -q "validation: own.tok, 74 windows" "$dir/own.out"; then ok; else
    bad "own.tok: not its last tenth's 74 windows"; sed 's/^/    /' "$dir/own.out"; fi

fails() { # name message args...: the run fails and says message
    name=$1; msg=$2; shift 2
    if "$B/weft-train" $common "$@" >"$dir/$name.out" 2>&1; then
        bad "$name: ran"
    elif grep -q "$msg" "$dir/$name.out"; then
        ok
    else
        bad "$name: no \"$msg\""; sed 's/^/    /' "$dir/$name.out"
    fi
}
fails vocab "tiny_train_000001.bin: token [0-9]* at position [0-9]* is outside the model's vocabulary of 64" \
    --model gpt:vocab=64,ctx=16,layers=1,heads=2,dim=32 --data "llmc:$dir/gpt2" --steps 2
head -c 2000 "$dir/gpt2/tiny_train_000003.bin" >"$dir/gpt2/tiny_train_000004.bin"
fails truncated "tiny_train_000004.bin: the header counts 2500 tokens .* (truncated?)" \
    --data "llmc:$dir/gpt2" --steps 2
rm -f "$dir/gpt2/tiny_train_000004.bin"
cp "$dir/gpt2/tiny_val_000000.bin" "$dir/plain.bin"
fails noval "neither _train nor _val" --data "llmc:$dir/plain.bin" --steps 2
run plainval 1 --data "llmc:$dir/plain.bin,$dir/gpt2/tiny_val_000000.bin" --steps 2

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
