#!/bin/sh
# Text found on this machine, for the tokenizer's tests and benchmark:
# a few man pages rendered, licenses and docs, man pages in other
# languages, Python's library, man pages' source; valid UTF-8 only.
#
#   sh tests/tokenizer/corpus.sh ORACLE OUTDIR BUDGET CHUNK
#
# writes about BUDGET bytes as OUTDIR/NNN.txt of about CHUNK bytes each
# (ORACLE: where make tokenizer-oracle put js-tiktoken; its driver reads
# the files). Nothing here is a fixed list: what the machine has is used.
ORACLE=$1 OUT=$2 BUDGET=$3 CHUNK=$4
L=$(mktemp -d)
trap 'rm -rf "$L"' EXIT
mkdir "$L/rendered"
n=0
for f in $(find /usr/share/man/man1 -name '*.gz' 2>/dev/null | sort | head -n 400 | awk 'NR % 40 == 1'); do
    n=$((n + 1))
    MANWIDTH=80 man -l "$f" 2>/dev/null | col -b >"$L/rendered/$n.txt" 2>/dev/null
done
ls "$L"/rendered/*.txt >"$L/rendered.list" 2>/dev/null
find /usr/share/common-licenses /usr/share/doc -type f \( -name '*.txt' -o -name 'README*' \
    -o -name 'copyright' \) 2>/dev/null | sort >"$L/docs"
# by page name, so that each page's translations (German to Japanese) come together
find /usr/share/man -name '*.gz' 2>/dev/null | grep -v '/man/man' |
    awk -F/ '{ print $NF "\t" $0 }' | sort | cut -f2 >"$L/man_l10n"
ls /usr/lib/python3*/*.py 2>/dev/null | sort >"$L/python"
find /usr/share/man/man1 /usr/share/man/man3 /usr/share/man/man5 /usr/share/man/man8 \
    -name '*.gz' 2>/dev/null | sort >"$L/man"
node "$(dirname "$0")/gpt2_oracle.mjs" "$ORACLE" corpus "$OUT" "$CHUNK" "$BUDGET" \
    "$L/rendered.list" "$L/docs" "$L/man_l10n" "$L/python" "$L/man"
