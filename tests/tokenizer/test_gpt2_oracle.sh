#!/bin/sh
# GPT-2's tokenizer against js-tiktoken (make tokenizer-oracle): the
# committed sample (tests/tokenizer/sample.txt) and text found on this
# machine (licenses, docs, man pages in several languages, Python's
# library, a few man pages rendered) are encoded by both and must give the
# same tokens; then weft-tokenize's shards decode back to their text.
# About 2 MB by default; TOKENIZER_FULL=1 takes 12 MB; under sanitizers
# (TEST_SCALE > 1) the sample alone. Skips, passing, without node, the
# oracle or the tables (make tokenizer-data).
# TEST_TIMEOUT(600)
cd "$(dirname "$0")/../.." || exit 1
B=${BUILD:-build}
ORACLE=$B/tokenizer-oracle
TK=$B/weft-tokenize
DRIVER=tests/tokenizer/gpt2_oracle.mjs
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { echo "skipped: $1"; echo "summary: 0 passed, 0 failed"; exit 0; }

command -v node >/dev/null 2>&1 || skip "no node (apt-get install nodejs)"
[ -f "$ORACLE/node_modules/js-tiktoken/package.json" ] || skip "no js-tiktoken in $ORACLE (make tokenizer-oracle)"
[ -x "$TK" ] || skip "no $TK (make all)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
printf 'x' >"$T/x"
"$TK" --encoding gpt2 --ids "$T/x" >/dev/null 2>"$T/err" ||
    skip "no tokenizer data (make tokenizer-data): $(cat "$T/err")"

# same NAME FILE: both encode FILE; the first difference is shown
same() {
    "$TK" --encoding gpt2 --ids "$2" >"$2.weft.ids" 2>"$T/err" || { bad "$1: weft-tokenize: $(cat "$T/err")"; return; }
    if cmp -s "$2.js.ids" "$2.weft.ids"; then
        ok "$1 ($(wc -l <"$2.js.ids") tokens)"
    else
        k=$(cmp "$2.js.ids" "$2.weft.ids" | sed -n 's/.* line \([0-9]*\).*/\1/p')
        bad "$1: first difference at token $((${k:-1} - 1)) (js-tiktoken first, weft second):"
        node "$DRIVER" "$ORACLE" explain "$2.js.ids" "$2.weft.ids" $((${k:-1} - 1)) | sed 's/^/    /'
    fi
}

cp tests/tokenizer/sample.txt "$T/sample.txt"
node "$DRIVER" "$ORACLE" encode "$T/sample.txt"
same "sample.txt" "$T/sample.txt"

scale=${TEST_SCALE:-1}
if [ "$scale" -le 1 ]; then
    budget=2000000
    [ "${TOKENIZER_FULL:-0}" = 1 ] && budget=12000000
    sh tests/tokenizer/corpus.sh "$ORACLE" "$T/corpus" "$budget" 500000
    node "$DRIVER" "$ORACLE" encode "$T"/corpus/*.txt
    for f in "$T"/corpus/*.txt; do
        same "machine text $(basename "$f") ($(wc -c <"$f") bytes)" "$f"
    done
fi

# The shards: llm.c's header, <|endoftext|> before each document, and back.
if "$TK" --encoding gpt2 -o "$T/s.bin" "$T/sample.txt" "$T/x" >"$T/out" 2>&1; then
    magic=$(od -An -tu4 -N12 "$T/s.bin" | tr -s ' ' | sed 's/^ //')
    want=$(( $(wc -l <"$T/sample.txt.js.ids") + 3 ))
    [ "$magic" = "20240520 1 $want" ] && ok "gpt2 shard header ($magic)" ||
        bad "gpt2 shard header: $magic, want 20240520 1 $want"
    { printf '<|endoftext|>'; cat "$T/sample.txt"; printf '<|endoftext|>x'; } >"$T/want"
    "$TK" --decode "$T/s.bin" >"$T/back" && cmp -s "$T/back" "$T/want" &&
        ok "gpt2 shard decodes to its documents" || bad "gpt2 shard does not decode back"
else
    bad "weft-tokenize --encoding gpt2: $(cat "$T/out")"
fi
if "$TK" --encoding bytes -o "$T/b.bin" "$T/sample.txt" >"$T/out" 2>&1 &&
   "$TK" --encoding bytes --decode "$T/b.bin" >"$T/back" && cmp -s "$T/back" "$T/sample.txt"; then
    ok "bytes shard decodes to its document"
else
    bad "bytes shard: $(cat "$T/out")"
fi
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
