#!/bin/sh
# GPT-2 encoding speed, weft against js-tiktoken, on the same text from
# this machine (tests/tokenizer/corpus.sh: man pages, docs, licenses,
# Python's library), one core each (taskset), the text in memory: only
# the encoding is timed (weft-tokenize's own clock around weft_bpe_encode;
# js-tiktoken's encode after a warm-up). Prints both in MB/s and the ratio.
# Needs make all tokenizer-data tokenizer-oracle.
#
#   sh bench/tokenize.sh [-s BYTES] [-c CPU]     BYTES: 10000000, CPU: 0
# BUILD=dir picks the build directory [build].
set -e
B=${BUILD:-build}
SIZE=10000000 CPU=0
while getopts "s:c:h" opt; do
    case $opt in
    s) SIZE=$OPTARG ;; c) CPU=$OPTARG ;;
    *) sed -n '2,11p' "$0" >&2; exit 2 ;;
    esac
done
ORACLE=$B/tokenizer-oracle
[ -f "$ORACLE/node_modules/js-tiktoken/package.json" ] || { echo "no js-tiktoken: make tokenizer-oracle" >&2; exit 1; }
[ -x "$B/weft-tokenize" ] || { echo "no $B/weft-tokenize: make all" >&2; exit 1; }
PIN=
command -v taskset >/dev/null 2>&1 && PIN="taskset -c $CPU"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
sh tests/tokenizer/corpus.sh "$ORACLE" "$T/corpus" "$SIZE" 1000000000
text=$T/corpus/000.txt
echo "text: $(wc -c <"$text") bytes; $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
# weft: best of three runs (each a fresh process: its word cache starts empty)
best=0
for r in 1 2 3; do
    s=$($PIN "$B/weft-tokenize" --encoding gpt2 -o "$T/out.bin" "$text" |
        sed -n 's/.*, \([0-9.]*\) MB\/s$/\1/p')
    best=$(echo "$s $best" | awk '{ print ($1 > $2) ? $1 : $2 }')
done
echo "weft:        $best MB/s (best of 3)"
js=$($PIN node tests/tokenizer/gpt2_oracle.mjs "$ORACLE" bench "$text" 1)
echo "$js"
jsr=$(echo "$js" | sed -n 's/^js-tiktoken: \([0-9.]*\) MB\/s.*/\1/p')
echo "ratio:       $(echo "$best $jsr" | awk '{ printf "%.1f", $1 / $2 }')x (weft / js-tiktoken)"
