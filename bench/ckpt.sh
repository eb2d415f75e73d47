#!/bin/sh
# Sharded checkpoints against the disk: dd's sequential write (synced) and
# read of as many bytes as a save, then a GPT's sharded save by all ranks
# together (--save DIR/, the loop waiting), its load
# by all ranks (a resume, each rank reading its share), and
# saves in the background (--save-every 3), the loop's stall against each
# save's duration (its file and its commit); last, the first touch of as
# much fresh memory as the load fills (bench/fresh_pages.c), a floor of
# its CPU. One self-contained run, about a minute.
#
#   make all && sh bench/ckpt.sh
#
# RANKS (4), ZERO (1), MODEL, ROUNDS (3 saves), LOAD_ROUNDS (5 loads), OUT
# (a scratch folder, removed unless given) and ARGS (more weft-train
# options, e.g. --save-cached) may be set.
set -eu
B=${BUILD:-build}
ranks=${RANKS:-4}
zero=${ZERO:-1}
model=${MODEL:-gpt:vocab=256,ctx=64,layers=6,heads=8,dim=384}
keep_out=${OUT:+1}
out=${OUT:-$(mktemp -d /tmp/weft-ckpt-bench.XXXXXX)}
mkdir -p "$out"
[ -n "$keep_out" ] || trap 'rm -rf "$out"' EXIT
train="--model $model --data builtin --seq 64 --batch 8 --optim adamw --no-eval --log-every 1000 ${ARGS:-}"

# dd's figure (bytes / seconds) as MB/s from its last line
dd_mbs() {
    tail -n 1 | awk -F, '{ for (i = 1; i <= NF; i++) if ($i ~ / s$/) { split($i, a, " "); t = a[1] }
                            split($1, b, " "); if (t > 0) printf "%.0f", b[1] / t / 1e6 }'
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; disk: $(df -h "$out" | awk 'NR == 2 { print $1 }')"

# the save, in the loop's time, against dd's synced write of the same
# bytes, in turns (ROUNDS of each; the disk of a virtual machine moves by
# a factor of several from one second to the next, so one of each can
# compare a good moment with a bad one): MB/s of all rounds together.
# Each starts on a disk with nothing left to write back (earlier files,
# deleted or not, would be flushed inside its fsync).
rounds=${ROUNDS:-3}
rows=
save_s=0; save_b=0; dd_s=0; dd_b=0
for i in $(seq "$rounds"); do
    rm -rf "$out/sync"
    sync
    "$B/weftrun" -n "$ranks" "$B/weft-train" $train --steps 2 --zero "$zero" --save "$out/sync/" \
        >"$out/sync.out" 2>&1
    line=$(grep "written in the loop's time" "$out/sync.out" | sed 's/^\[0\] //')
    mb=$(echo "$line" | sed -n 's/.*s and \([0-9.]*\) MB each.*/\1/p')
    one=$(echo "$line" | sed -n 's/.* time, \([0-9.]*\) s and .*/\1/p')
    save_s=$(echo "$save_s $one" | awk '{ print $1 + $2 }')
    save_b=$(echo "$save_b $mb" | awk '{ print $1 + $2 }')
    count=$(echo "$mb" | awk '{ c = int($1 / 4 + 0.999); print c < 1 ? 1 : c }')
    sync
    dd if=/dev/zero of="$out/dd.bin" bs=4M count="$count" conv=fsync 2>"$out/dd_w"
    dd_s=$(tail -n 1 "$out/dd_w" | awk -F, -v s="$dd_s" '{ for (i = 1; i <= NF; i++) if ($i ~ / s$/) { split($i, a, " "); t = a[1] } print s + t }')
    dd_b=$(tail -n 1 "$out/dd_w" | awk -v s="$dd_b" '{ print s + $1 / 1e6 }')
    [ "$i" = "$rounds" ] || rm -f "$out/dd.bin"
    rows="$rows  round $i: save $one s, dd write $(tail -n 1 "$out/dd_w" | sed 's/.*copied, //')
"
done
save_mbs=$(echo "$save_b $save_s" | awk '{ printf "%.1f", ($2 > 0 ? $1 / $2 : 0) }')
dd_w=$(echo "$dd_b $dd_s" | awk '{ printf "%.0f", ($2 > 0 ? $1 / $2 : 0) }')

# the load against dd's read of the same bytes, in turns (LOAD_ROUNDS of
# each, 5): the disk's read speed moves from one moment to the next as its
# write speed does (dd's O_DIRECT read of the same 129 MB took from 0.081
# to 0.238 s in rounds a few seconds apart, on a loaded host), so each
# round's load is set against the dd read just before it, and the figure
# is the median of the rounds' ratios, all of them printed. dd reads direct where the file system takes it, else
# through the page cache, which the load also uses.
#
# A load is every rank resuming (CRCs checked) from the files with their
# pages dropped from the cache, as dd's O_DIRECT read has them. A rank's
# load time is its wall window from opening the manifest to its
# parameters and optimiser state in place (the model made, the reads, the
# CRCs, the all-gather of the parameters and whatever the run sets up in
# between: its note gives each); the bytes are each rank's share of what
# it holds (a group's replicated parameters counted once), over the
# longest rank's time. The ranks load at the same time.
lrounds=${LOAD_ROUNDS:-5}
lrows=
ratios=
for i in $(seq "$lrounds"); do
    if dd if="$out/dd.bin" of=/dev/null bs=4M iflag=direct >"$out/dd_r" 2>&1; then
        how="O_DIRECT"
    else
        dd if="$out/dd.bin" of=/dev/null bs=4M >"$out/dd_r" 2>&1
        how="page cache"
    fi
    one_r=$(dd_mbs <"$out/dd_r")
    for f in "$out"/sync/step-*/rank-*.bin; do dd if="$f" iflag=nocache count=0 2>/dev/null; done
    "$B/weftrun" -n "$ranks" "$B/weft-train" --resume "$out/sync" --zero "$zero" --steps 2 \
        --no-eval >"$out/load.out" 2>&1
    load=$(grep 'resume: rank .* read' "$out/load.out" | sed 's/[,:]//g' | awk '
        { for (i = 1; i < NF; i++) { if ($i == "share") b += $(i + 1); if ($i == "in") s = $(i + 1) }
          if (s > hi) hi = s }
        END { if (hi > 0) printf "%.1f %.3f", b / 1e6, hi }')
    # the ranks' CPU seconds in their load windows, all together: the
    # load's cost apart from what other processes take of the wall time
    # and of those the kernel's (system): page faults above all, the
    # first writes to the fresh pages the load fills, whose cost on a
    # virtual machine moves with what its host still backs
    load_cpu=$(grep 'resume: rank .* read' "$out/load.out" | sed 's/[,:;()]//g' | awk '
        { for (i = 1; i < NF; i++) { if ($i == "CPU") c += $(i + 1); if ($i == "system") k += $(i + 1) } }
        END { printf "%.3f s, system %.3f", c, k }')
    load_mb=${load% *}
    load_s=${load#* }
    one_l=$(echo "$load_mb $load_s" | awk '{ printf "%.0f", ($2 > 0 ? $1 / $2 : 0) }')
    ratio=$(echo "$one_l $one_r" | awk '{ printf "%.0f", ($2 > 0 ? 100 * $1 / $2 : 0) }')
    ratios="$ratios $ratio"
    lrows="$lrows  load round $i: dd read $one_r MB/s, load $load_s s = $one_l MB/s (CPU $load_cpu): $ratio%
"
done
rm -f "$out/dd.bin"
# the median round (the lower middle of an even count)
med=$(echo "$ratios" | tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
pick=$(printf "%s" "$lrows" | grep ": $med%\$" | head -n 1)
dd_r=$(echo "$pick" | sed -n 's/.*dd read \([0-9]*\) MB.*/\1/p')
load_mbs=$(echo "$pick" | sed -n 's/.*s = \([0-9]*\) MB.*/\1/p')

# saves in the background every third step (a save's file has the steps
# between to be written in; saves faster than the disk take them would
# stall the loop on the disk, not on the save)
"$B/weftrun" -n "$ranks" "$B/weft-train" $train --steps 9 --zero "$zero" --save-every 3 \
    --keep 2 --save "$out/async/" >"$out/async.out" 2>&1
bg=$(grep "written in the background" "$out/async.out" | sed 's/^\[0\] //')
each=$(echo "$bg" | sed -n 's/.*, \([0-9.]*\) s and .*/\1/p')
stall=$(echo "$bg" | sed -n 's/.*stalled \([0-9.]*\) s each (\([0-9.]*\)%).*/\1 \2/p')

echo "model $model, $ranks ranks, ZeRO-$zero: a save is $mb MB; the load's shares $load_mb MB;" \
     "the last load's ranks:"
grep 'resume: rank .* read' "$out/load.out" | sed 's/^\[[0-9]*\] resume: /  /'

printf "%s" "$rows"
printf "%s" "$lrows"
printf "%-44s %10s\n" "" "MB/s"
printf "%-44s %10s\n" "dd write (4 MiB blocks, fsync; $rounds rounds)" "$dd_w"
printf "%-44s %10s\n" "sharded save, all ranks (files + manifest; $rounds)" "$save_mbs"
printf "%-44s %10s\n" "dd read ($how; the median round's)" "$dd_r"
printf "%-44s %10s\n" "load, all ranks (resume, CRCs; the same round)" "$load_mbs"
echo "save / dd write: $(echo "$save_mbs $dd_w" | awk '{ printf "%.0f%%", ($2 > 0 ? 100 * $1 / $2 : 0) }');" \
     "load / dd read: $med% (median of $lrounds rounds:$(echo "$ratios" | sed 's/\([0-9]\) /\1%, /g; s/\([0-9]\)$/\1%/'))"
echo "background saves: $each s each (file and commit); loop stalled $(echo "$stall" | awk '{ printf "%s s (%s%%)", $1, $2 }')"

# The load's floor that dd's figure does not show: every byte of the
# state it fills is memory its processes have not touched before (AdamW:
# a save is the parameters and two moments; below ZeRO-3 every rank holds
# all the parameters, at ZeRO-0 the moments too), where dd reuses one
# buffer. Its first touch is the kernel's zeroing, and on a virtual
# machine also the host's fault where it took the memory back
# (bench/fresh_pages.c): at its fastest here, as seconds of CPU over this
# machine's cores, against dd's read of the load's bytes.
fresh=$(echo "$mb $ranks $zero" | awk '{ p = $1 / 3; printf "%.0f", p * ($3 < 3 ? $2 : 1) + 2 * p * ($3 == 0 ? $2 : 1) }')
if ${CC:-cc} -std=c11 -O2 -o "$out/fresh_pages" "$(dirname "$0")/fresh_pages.c" 2>/dev/null; then
    "$out/fresh_pages" "$fresh" 4 | sed 's/^/  /' >"$out/fresh"
    cat "$out/fresh"
    best=$(sed -n 's/.*(\([0-9.]*\) s), after.*(\([0-9.]*\) s)$/\1 \2/p' "$out/fresh" | tr ' ' '\n' | sort -n | head -n 1)
    echo "the load's fresh memory: $fresh MB; at its fastest first touch above, $best s of CPU," \
         "$(echo "$best $(nproc)" | awk '{ printf "%.3f", $1 / $2 }') s on $(nproc) cores;" \
         "dd reads the load's $load_mb MB in $(echo "$load_mb $dd_r" | awk '{ printf "%.3f", ($2 > 0 ? $1 / $2 : 0) }') s (the median round's)"
fi
