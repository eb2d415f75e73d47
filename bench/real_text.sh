#!/bin/sh
# A real corpus end to end: English text that every Debian machine has -
# the licences in /usr/share/common-licenses (package base-files) and the
# copyright file of every installed package (/usr/share/doc/*/copyright),
# each distinct text once - tokenized with GPT-2's BPE by weft-tokenize
# into llm.c shards (one document a file; a file's checksum puts it in the
# validation shard one time in twenty), then a small Llama trained at
# tp 2 x pp 2 x dp 2 with ZeRO-1 on 8 ranks. The validation loss is
# printed for the fresh model, halfway (the run saved, evaluated with
# --eval-only and resumed) and at the end.
#
#   make all tokenizer-data && sh bench/real_text.sh
#
# STEPS (400), RANKS layout (tp 2 x pp 2 x dp 2), MODEL and OUT (a scratch
# folder, kept) may be set.
set -eu
B=${BUILD:-build}
out=${OUT:-$(mktemp -d /tmp/weft-real-text.XXXXXX)}
steps=${STEPS:-400}
half=$((steps / 2))
model=${MODEL:-llama:vocab=50257,ctx=128,layers=4,heads=4,kv_heads=2,dim=64,ffn=176,tied=1}
layout=${LAYOUT:---tp 2 --pp 2 --zero 1}
ranks=${RANKS:-8}
train="--model $model --data llmc:$out/text_train_000000.bin,$out/text_val_000000.bin --seq 128
       --batch 16 --optim adamw --lr 0.003 --warmup 20 --steps $steps --seed 1"

mkdir -p "$out/docs"
# each distinct text once (many packages ship the same licence)
ls /usr/share/common-licenses/* /usr/share/doc/*/copyright 2>/dev/null | while read -r f; do
    [ -f "$f" ] && printf '%s %s\n' "$(md5sum <"$f" | cut -c1-32)" "$f"
done | sort -u -k1,1 >"$out/files"
: >"$out/train.list"
: >"$out/val.list"
while read -r sum f; do
    if [ $((0x$(echo "$sum" | cut -c1-6) % 20)) -eq 0 ]; then
        echo "$f" >>"$out/val.list"
    else
        echo "$f" >>"$out/train.list"
    fi
done <"$out/files"
echo "corpus: $(wc -l <"$out/train.list") training and $(wc -l <"$out/val.list") validation documents," \
    "$(cat $(cat "$out/train.list") | wc -c) and $(cat $(cat "$out/val.list") | wc -c) bytes"
t0=$(date +%s.%N)
"$B/weft-tokenize" --encoding gpt2 -o "$out/text_train_000000.bin" $(cat "$out/train.list")
"$B/weft-tokenize" --encoding gpt2 -o "$out/text_val_000000.bin" $(cat "$out/val.list")
t1=$(date +%s.%N)
echo "tokenized in $(echo "$t1 - $t0" | bc) s: $(($(stat -c %s "$out/text_train_000000.bin") / 2 - 512))" \
    "training and $(($(stat -c %s "$out/text_val_000000.bin") / 2 - 512)) validation tokens"

val() { grep -h "validation:" "$1" | sed 's/^\[[0-9]*\] //'; }
echo "== the fresh model (--eval-only, $ranks ranks: $layout)"
"$B/weftrun" -n "$ranks" "$B/weft-train" $train $layout --eval-only --eval-prompts 0 \
    >"$out/fresh.out" 2>&1 || { tail -n 20 "$out/fresh.out"; exit 1; }
val "$out/fresh.out"
echo "== $half steps, saved"
"$B/weftrun" -n "$ranks" "$B/weft-train" $train $layout --stop-at "$half" --no-eval \
    --save "$out/half.ckpt" --metrics "$out/first.csv" >"$out/first.out" 2>&1 ||
    { tail -n 20 "$out/first.out"; exit 1; }
grep -h "samples/s\|step $half" "$out/first.out" | tail -n 2
"$B/weftrun" -n "$ranks" "$B/weft-train" --resume "$out/half.ckpt" $layout --eval-only \
    --eval-prompts 0 >"$out/half.out" 2>&1 || { tail -n 20 "$out/half.out"; exit 1; }
val "$out/half.out"
echo "== resumed to step $steps"
"$B/weftrun" -n "$ranks" "$B/weft-train" --resume "$out/half.ckpt" $layout --eval-prompts 0 \
    --metrics "$out/second.csv" >"$out/second.out" 2>&1 || { tail -n 20 "$out/second.out"; exit 1; }
grep -h "samples/s" "$out/second.out" | tail -n 1
val "$out/second.out"
echo "(files in $out)"
