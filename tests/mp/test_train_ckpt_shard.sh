#!/bin/sh
# Sharded checkpoints (--save DIR/): every rank writes its own file, the
# manifest commits the save. A save at tp 2 x pp 2 x dp 2 with ZeRO-2
# resumes at one process, at dp 4 with ZeRO-3 and at tp 4, each going on
# with losses within 1e-5 of the uninterrupted run; at the same layout a
# resume is bit-exact (the metrics rows and the final parameters) for DP
# with ZeRO 0-3 and a pipeline (ZeRO 1 and 3 at 3 ranks too, each rank
# reading its own shard alone); --keep rotates; a rank killed (-9) during
# repeated saves leaves a loadable checkpoint every time; a directory that
# cannot be written (a file in its place, moved away, a full file system)
# fails every rank naming it; a changed or short file fails the resume
# naming the file, slice and tensor (also each rank of a resume from its
# own ZeRO shard); another sync mode warns; an elastic
# run's saves after a shrink resume at the new world; the memory-wall GPT saves,
# resumes at another layout and evaluates under its --mem-limit (each
# rank's peak resident set checked), each rank reading well under half the
# checkpoint; weft-ckpt inspects and consolidates; with the experts
# divided (--ep) each is saved once and the resume is bit-exact, ZeRO 2
# and 3 included (sharded directory and single file; ep 2 x tp 2 at
# ZeRO 2); a single-file save whose gather fails on one rank fails every
# rank with its own error.
# Under sanitizers (TEST_SCALE > 1) fewer layouts and kills.
# TEST_TIMEOUT(600)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gpt="--model gpt --layers 4 --heads 4 --dim 32 --data builtin --batch 16"
common="--steps 12 --quiet --no-eval --clip 1 --optim adamw --lr 0.003"
thin=0
[ "${TEST_SCALE:-1}" -gt 1 ] && thin=1

. "$(dirname "$0")/train_lib.sh"

# exact: the train rows of two metrics files are the same text
exact() {
    a=$(grep ',train,' "$dir/$1.csv" | cut -d, -f1,4,7)
    b=$(grep ',train,' "$dir/$2.csv" | cut -d, -f1,4,7)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "$1: not bit-exact with $2"; fi
}

# params: the final saved parameters of two runs are the same bytes
params() {
    if "$B/weft-train" --inspect "$dir/$1" >"$dir/$1.inspect" 2>&1 &&
        "$B/weft-train" --inspect "$dir/$2" >"$dir/$2.inspect" 2>&1 &&
        [ "$(grep '  param/' "$dir/$1.inspect")" = "$(grep '  param/' "$dir/$2.inspect")" ] &&
        grep -q '  param/' "$dir/$1.inspect"; then
        ok
    else
        bad "$1: final checkpoint differs from $2"
    fi
}

# across layouts
run ref 1 $gpt
run a 8 $gpt --tp 2 --pp 2 --zero 2 --stop-at 6 --save "$dir/a/" && {
    [ -f "$dir/a/latest" ] && ok || bad "no latest in $dir/a"
    run a1 1 --resume "$dir/a" && same a1 ref
    [ $thin = 1 ] || { run a4 4 --resume "$dir/a" --zero 3 && same a4 ref; }
    [ $thin = 1 ] || { run at4 4 --resume "$dir/a" --tp 4 && same at4 ref; }
}

# bit-exact at the same layout: DP with ZeRO 0-3, a pipeline
zs="0 1 2 3"
[ $thin = 1 ] && zs="0 3"
for z in $zs; do
    run full$z 2 $gpt --zero $z --save "$dir/full$z/" &&
        run half$z 2 $gpt --zero $z --stop-at 5 --save "$dir/half$z/" &&
        run half$z 2 --resume "$dir/half$z" --zero $z --save "$dir/res$z/" &&
        exact half$z full$z && params res$z full$z
done
# at 3 ranks (a bucket's tail on the last): a ZeRO rank reads its own
# shard alone, what it holds of the parameters and optimiser state (its
# share), and the resume is bit-exact
# own name: every rank's resume read its share and nothing more
own() {
    if [ "$(grep -c 'resume: rank' "$dir/$1.out")" = 3 ] &&
        grep 'resume: rank' "$dir/$1.out" | sed 's/[(),]//g' |
        awk '{ for (i = 1; i < NF; i++) { if ($i == "read") r = $(i + 1); if ($i == "share") s = $(i + 1) }
               if (r != s || r == 0) bad = 1 } END { exit bad }'; then
        ok
    else
        bad "$1: a rank read other than its own shard"; grep 'resume: rank' "$dir/$1.out"
    fi
}
# cold DIR: its files written to the disk and dropped from the page cache,
# so that a resume reads them from the disk (past the page cache where the
# file system takes O_DIRECT)
cold() {
    for f in "$1"/step-*/rank-*.bin; do
        sync "$f" && dd if="$f" iflag=nocache count=0 2>/dev/null
    done
}
# past NAME DIR: where DIR's file system takes direct reads, every rank of
# resume NAME read some of its bytes past the page cache
past() {
    f=$(ls "$2"/step-*/rank-00000.bin | head -n 1)
    dd if="$f" of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null || { ok; return; }
    if grep 'resume: rank' "$dir/$1.out" | sed 's/[;,]//g' |
        awk '{ for (i = 1; i < NF; i++) if ($i == "bytes" && $(i + 1) == "of" && $(i + 2) == "them")
                   d = $(i - 1)
               if (d + 0 == 0) none = 1; n++ } END { exit none || n == 0 }'; then
        ok
    else
        bad "$1: a rank's resume from files not in the page cache read none past it"
        grep 'resume: rank' "$dir/$1.out"
    fi
}
for z in 1 3; do
    run o3f$z 3 $gpt --zero $z --steps 8 && run o3h$z 3 $gpt --zero $z --steps 8 --stop-at 4 \
        --save "$dir/o3h$z/" && cold "$dir/o3h$z" &&
        run o3h$z 3 --resume "$dir/o3h$z" --zero $z --steps 8 &&
        exact o3h$z o3f$z && own o3h$z && past o3h$z "$dir/o3h$z"
done
run pfull 2 $gpt --pp 2 --save "$dir/pfull/" &&
    run phalf 2 $gpt --pp 2 --stop-at 7 --save "$dir/phalf/" &&
    run phalf 2 --resume "$dir/phalf" --pp 2 --save "$dir/pres/" &&
    exact phalf pfull && params pres pfull

# --keep 2 over saves every 2 steps: two complete saves, latest the last
run keep 2 $gpt --zero 1 --save-every 2 --keep 2 --save "$dir/keep/" && {
    n=$(ls -d "$dir"/keep/step-* 2>/dev/null | wc -l)
    last=$(cat "$dir/keep/latest" 2>/dev/null)
    case "$n:$last" in
    2:step-00000012-*) ok ;;
    *) bad "--keep 2: $n saves, latest '$last'" ;;
    esac
}

# kill -9 of a random rank at a random moment of repeated saves (a tiny
# GPT saving every step in the background): after each kill the directory's
# latest resumes (--eval-only at one process: every slice read, each
# checked against its CRC)
tiny="--model gpt --layers 1 --heads 2 --dim 16 --data builtin --batch 8"
rounds=20
[ $thin = 1 ] && rounds=3
i=0
while [ $i -lt $rounds ]; do
    i=$((i + 1))
    "$B/weftrun" -n 4 "$B/weft-train" $tiny --steps 3000 --quiet --no-eval --zero 2 \
        --save-every 1 --keep 2 --save "$dir/kill/" >"$dir/kill.out" 2>&1 &
    job=$!
    # wait for a first complete save, then a random moment more
    t=0
    while [ ! -f "$dir/kill/latest" ] && [ $t -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
    sleep "0.$(awk -v s=$i 'BEGIN { srand(s * 7919 + 13); printf "%02d", rand() * 60 }')"
    victim=$(pgrep -P "$job" -f weft-train | awk -v s=$i 'BEGIN { srand(s) } { p[NR] = $1 } END { if (NR) print p[int(rand() * NR) + 1] }')
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    wait $job 2>/dev/null
    if "$B/weft-train" --resume "$dir/kill" --eval-only --quiet >"$dir/kill.load" 2>&1; then
        ok
    else
        bad "kill round $i: $dir/kill does not resume"; tail -n 3 "$dir/kill.load"
    fi
done

# the memory wall: a GPT that trains at 8 ranks only split saves, resumes
# at another split and evaluates there under the same --mem-limit: each
# rank's peak resident set (VmHWM) is checked after the save, the resume's
# load and the evaluation, and its state after its first step; a limit
# below the resume's peak fails it, naming the rank. One rank's state alone
# is 102 MB; split, a rank peaks at 40-60 MB (the program, its libraries
# and the collectives' shared memory included), so 64M holds with room for
# another CPU's kernels and buffers.
wall="--model gpt:vocab=256,ctx=32,layers=8,heads=8,dim=256 --data builtin --batch 8 --mem-limit 64M"
if [ $thin = 0 ]; then
    run wall 8 $wall --steps 3 --stop-at 2 --tp 2 --pp 2 --zero 3 --save "$dir/wall/" && {
        "$B/weftrun" -n 8 "$B/weft-train" --resume "$dir/wall" --steps 3 --mem-limit 64M \
            --tp 4 --pp 2 --zero 3 --eval-prompts 4 >"$dir/wallr.out" 2>&1
        rc=$?
        if [ $rc = 0 ] && grep -q "peak resident .* by the end of the resume" "$dir/wallr.out" &&
            grep -q "peak resident .* by the end of the evaluation" "$dir/wallr.out" &&
            grep -q "^\[0\] validation: .* loss [0-9]" "$dir/wallr.out"; then
            ok
        else
            bad "memory wall: resume at tp 4 x pp 2 and evaluation (exit $rc)"
            # the first rank to fail says why; the others only leave
            grep "weft-train: \|memory: " "$dir/wallr.out" | grep -v "leaving the job" | head -n 4
            tail -n 3 "$dir/wallr.out"
        fi
        cat "$dir/wallr.out" >>"$dir/wall.out" # its resume: notes, checked below
        if "$B/weftrun" -n 8 "$B/weft-train" --resume "$dir/wall" --steps 3 --mem-limit 20M \
            --tp 4 --pp 2 --zero 3 --no-eval >"$dir/walllow.out" 2>&1; then
            bad "memory wall: a resume over --mem-limit 20M passed"
        elif grep -q "mem-limit 21.0 MB: rank [0-9]*'s peak resident memory reached .* by the end of the resume" \
            "$dir/walllow.out"; then
            ok
        else
            bad "memory wall: over the limit, no error naming the rank"; tail -n 3 "$dir/walllow.out"
        fi
    }
fi

# a directory that cannot be written fails every rank, naming it: a file
# where the directory should be; the directory gone (moved away) between
# background saves; a file system too small (a 48 KiB tmpfs in a mount
# namespace of its own, where unshare and mount are allowed)
# fails_all name path: both ranks' errors name path
fails_all() {
    if [ "$(grep -c "cannot save checkpoint $2" "$dir/$1.out")" = 2 ]; then
        ok
    else
        bad "$1: not every rank's error names $2"; tail -n 3 "$dir/$1.out"
    fi
}
: >"$dir/plain"
"$B/weftrun" -n 2 "$B/weft-train" $tiny --steps 2 --quiet --no-eval \
    --save "$dir/plain/" >"$dir/notdir.out" 2>&1 && bad "a save into a file passed"
fails_all notdir "$dir/plain/"
"$B/weftrun" -n 2 "$B/weft-train" $tiny --steps 3000 --quiet --no-eval --save-every 1 \
    --save "$dir/gone/" >"$dir/gone.out" 2>&1 &
job=$!
t=0
while [ ! -f "$dir/gone/latest" ] && [ $t -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
mv "$dir/gone" "$dir/gone.moved"
wait $job && bad "a save into a directory that went away passed"
fails_all gone "$dir/gone/"
mkdir -p "$dir/small"
if unshare -m sh -c "mount -t tmpfs -o size=48k tmpfs '$dir/small'" 2>/dev/null; then
    unshare -m sh -c "mount -t tmpfs -o size=48k tmpfs '$dir/small' &&
        '$B/weftrun' -n 2 '$B/weft-train' $tiny --steps 2 --quiet --no-eval \
            --save '$dir/small/c/' && echo passed; ls '$dir/small/c'" >"$dir/full.out" 2>&1
    grep -q '^passed' "$dir/full.out" && bad "a save to a full file system passed"
    fails_all full "$dir/small/c/"
    grep -q 'No space left' "$dir/full.out" && ok || bad "full: no ENOSPC in the message"
    grep -q '^latest' "$dir/full.out" && bad "full: latest names a save that failed"
fi

# --elastic: a rank killed at step 4 of 8, saves every 3 steps (each one
# synchronous under --elastic); the saves after the shrink record the new
# world and one membership change, and resume at 3 ranks going on within
# 1e-5 of the elastic run; every save loads; a resume under --elastic
# counts on from the saved run's changes
el="--model gpt --layers 1 --heads 2 --dim 16 --data builtin --batch 12 --quiet --no-eval"
if "$B/weftrun" --elastic 2:4 -n 4 "$B/weft-train" $common $el --steps 8 --elastic --zero 2 \
    --kill-at 2:4 --save-every 3 --save "$dir/el/" --metrics "$dir/el.csv" >"$dir/el.out" 2>&1; then
    ok
    grep -aq 'world=4 tp=1 pp=1 dp=4 zero=2 sync=full compress=none elastic=0 launch=4' \
        "$dir"/el/step-00000003-*/manifest && ok || bad "elastic: the save before the shrink"
    grep -aq 'world=3 tp=1 pp=1 dp=3 zero=2 sync=full compress=none elastic=1 launch=4' \
        "$dir"/el/step-00000006-*/manifest && ok || bad "elastic: the save after the shrink"
    for s in "$dir"/el/step-*; do
        "$B/weft-train" --resume "$s" --eval-only --quiet >"$dir/el.load" 2>&1 && ok ||
            bad "elastic: $s does not load"
    done
    run elr 3 --resume "$(ls -d "$dir"/el/step-00000006-*)" --steps 8 --zero 2 && same elr el
    # resumed under --elastic, the run's membership changes go on from the
    # saved one's: its save records the one change before it
    "$B/weftrun" --elastic 2:3 -n 3 "$B/weft-train" $common $el --elastic --zero 2 --steps 8 \
        --resume "$(ls -d "$dir"/el/step-00000006-*)" --save "$dir/ele/" >"$dir/ele.out" 2>&1 &&
        grep -aq 'world=3 tp=1 pp=1 dp=3 zero=2 sync=full compress=none elastic=1 launch=3' \
            "$dir"/ele/step-00000008-*/manifest && ok ||
        bad "elastic: a resumed run's save does not carry the membership changes"
else
    bad "elastic run with sharded saves: exit $?"; tail -n 5 "$dir/el.out"
fi

# a file changed or cut short after its save: the resume fails naming the
# file, the slice and the tensor
if [ -f "$dir/a/latest" ]; then
    cp -r "$dir/a" "$dir/bent"
    f=$(ls "$dir"/bent/step-*/rank-00003.bin)
    printf 'x' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
    if "$B/weftrun" -n 2 "$B/weft-train" $common --resume "$dir/bent" --zero 1 \
        >"$dir/bent.out" 2>&1; then
        bad "a resume from a changed file passed"
    elif grep -q "rank-00003.bin: slice [0-9]* (bytes .*) fails its CRC .*, reading tensor param/" \
        "$dir/bent.out"; then
        ok
    else
        bad "changed file: the error does not name the file, slice and tensor"
        tail -n 3 "$dir/bent.out"
    fi
    truncate -s 64 "$f"
    if "$B/weft-train" $common --resume "$dir/bent" >"$dir/short.out" 2>&1; then
        bad "a resume from a file cut short passed"
    elif grep -q "rank-00003.bin: 64 bytes, the manifest says [0-9]*, reading tensor " \
        "$dir/short.out"; then
        ok
    else
        bad "short file: the error does not name the file and tensor"; tail -n 3 "$dir/short.out"
    fi
fi

# ---- sync modes' state, tp x pp and token shards: bit-exact from a mid-run save
# later: the train rows of name after step from are ref's, and not none
later() {
    a=$(grep ',train,' "$dir/$2.csv" | cut -d, -f1,4,7 | awk -F, -v s="$3" '$1 > s')
    b=$(grep ',train,' "$dir/$1.csv" | cut -d, -f1,4,7)
    if [ -n "$b" ] && [ "$a" = "$b" ]; then ok; else bad "$1: not bit-exact with $2 after step $3"; fi
}
# DiLoCo (anchor, outer momentum, step in the round: saved at step 6 of
# rounds of 4) and local SGD: each rank's own model and optimiser, from
# the --save-every save mid-run; another world size warns and starts the
# sync state afresh, as does a save without the ranks' sync files (which
# is then not exact: the files matter)
modes="diloco:4 local:4"
[ $thin = 1 ] && modes="diloco:4"
for m in $modes; do
    k=${m%%:*}
    run ${k}f 2 $gpt --sync $m --save-every 6 --save "$dir/${k}f/" &&
        run ${k}r 2 --resume "$(ls -d "$dir/${k}f"/step-00000006-*)" --sync $m \
            --save "$dir/${k}r/" && later ${k}r ${k}f 6 && params ${k}r ${k}f
done
# full sync with PowerSGD: each rank's error feedback and warm-started Q
run psgdf 2 $gpt --compress powersgd:2 --save-every 6 --save "$dir/psgdf/" &&
    run psgdr 2 --resume "$(ls -d "$dir/psgdf"/step-00000006-*)" --compress powersgd:2 \
        --save "$dir/psgdr/" && later psgdr psgdf 6 && params psgdr psgdf
if [ -d "$dir/dilocof" ]; then
    if run dilocow 3 --resume "$dir/dilocof" --steps 14 --sync diloco:4 &&
        grep -q "warning: .* holds no --sync diloco:4 state for 3 ranks" "$dir/dilocow.out"; then
        ok
    else
        bad "diloco resumed at 3 ranks: no warning"
    fi
    # the manifest's sync mode against the resume's: a warning
    if run dilocofull 2 --resume "$dir/dilocof" --steps 14 &&
        grep -q "warning: .* was saved with --sync diloco:4 --compress none, this run has --sync full --compress none" \
            "$dir/dilocofull.out"; then
        ok
    else
        bad "diloco resumed with full sync: no warning naming both modes"
    fi
    if [ $thin = 0 ]; then
        cp -r "$(ls -d "$dir/dilocof"/step-00000006-*)" "$dir/bare"
        rm -f "$dir"/bare/sync-*.wckpt
        run bare 2 --resume "$dir/bare" --sync diloco:4 && {
            grep -q "warning: .* holds no --sync diloco:4 state" "$dir/bare.out" && ok ||
                bad "diloco without its sync files: no warning"
            a=$(grep ',train,' "$dir/dilocof.csv" | cut -d, -f1,4,7 | awk -F, '$1 > 6')
            [ "$a" != "$(grep ',train,' "$dir/bare.csv" | cut -d, -f1,4,7)" ] && ok ||
                bad "diloco without its sync files resumed exactly: the test sees nothing"
        }
    fi
fi
# tp 2 x pp 2 at the same layout
run tpfull 4 $gpt --tp 2 --pp 2 --save "$dir/tpfull/" &&
    run tphalf 4 $gpt --tp 2 --pp 2 --stop-at 5 --save "$dir/tphalf/" &&
    run tphalf 4 --resume "$dir/tphalf" --tp 2 --pp 2 --save "$dir/tpres/" &&
    exact tphalf tpfull && params tpres tpfull
# llm.c token shards (70 windows of 17 tokens in shards of 41 and 29): a
# background save after step 5 of batch 8 falls inside the first shard, the
# run goes on into the second epoch
mkdir -p "$dir/tok"
python3 - "$dir/tok" <<'EOF'
import random, struct, sys
r = random.Random(5)
def shard(path, n):
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack('<%dH' % n, *[r.randrange(256) for _ in range(n)]))
shard(sys.argv[1] + '/t_train_000001.bin', 700)
shard(sys.argv[1] + '/t_train_000002.bin', 500)
shard(sys.argv[1] + '/t_val_000000.bin', 300)
EOF
tok="--model gpt:vocab=256,ctx=16,layers=1,heads=2,dim=16 --seq 16 --batch 8 --data llmc:$dir/tok"
run tokf 2 $tok --zero 1 --save-every 5 --save "$dir/tokf/" &&
    run tokr 2 --resume "$(ls -d "$dir/tokf"/step-00000005-*)" --data "llmc:$dir/tok" \
        --zero 1 --save "$dir/tokr/" && later tokr tokf 5 && params tokr tokf

# reading what a rank needs: each rank of the memory-wall resume (tp 4 x
# pp 2) read well under half the checkpoint; weft-ckpt lists a save's
# slices, and its consolidated file holds the directory's parameters bit
# for bit and resumes like it; a file changed after its save fails the
# resume (the slices' CRCs)
if [ $thin = 0 ]; then
    if awk '/resume: rank [0-9]+ read/ {
                for (i = 1; i < NF; i++) { if ($i == "read") r = $(i + 1); if ($i == "checkpoint'"'"'s") a = $(i + 1) }
                n++; if (r * 2 >= a) big = 1 }
            END { exit !(n == 8 && !big) }' "$dir/wall.out"; then
        ok
    else
        bad "memory-wall resume: a rank read half the checkpoint or more"
        grep 'resume: rank' "$dir/wall.out" | head -n 8
    fi
fi
if [ -f "$dir/a/latest" ]; then
    if "$B/weft-ckpt" inspect "$dir/a" >"$dir/a.list" 2>&1 &&
        grep -q 'layout world=8 tp=2 pp=2 dp=2 zero=2' "$dir/a.list" &&
        grep -q '^  slices of param/tok_emb.weight \[256, 32\]' "$dir/a.list" &&
        grep -q '^      rank-00001.bin @' "$dir/a.list"; then
        ok
    else
        bad "weft-ckpt inspect $dir/a"; head -n 5 "$dir/a.list"
    fi
    "$B/weft-ckpt" consolidate "$dir/a" "$dir/a.ckpt" >"$dir/cons.out" 2>&1 &&
        params a.ckpt a && run cons 2 --resume "$dir/a.ckpt" && same cons ref
fi

# ---- divided experts (--ep): a rank writes the experts it holds (their
# tensor slices under --tp) only where it is the first of their replicas,
# so the save holds each element once (its files' bytes are one process's
# save's); at its own layout the resume is bit-exact (ep 2 with ZeRO 0
# to 3, ep 2 x tp 2, ep 2 x pp 2; from a background save too), at
# another (one process, ep 4, ep 2 x tp 2 from a pipeline's, one process
# from ep 2 x pp 2 x dp 4, where the experts have replicas) within 1e-5
# of one process
moe="--model llama:vocab=256,ctx=32,layers=2,heads=4,kv_heads=2,dim=32,ffn=48,experts=8,topk=2"
moe="$moe --data builtin --batch 8"
# bytes dir: the sum of the files of dir's latest save
bytes() { cat "$1/$(cat "$1/latest")"/rank-*.bin | wc -c; }
eps="ez0:--ep_2 ez1:--ep_2_--zero_1 etp:--ep_2_--tp_2 epp:--ep_2_--pp_2"
eps="$eps ez2:--ep_2_--zero_2 ez3:--ep_2_--zero_3"
[ $thin = 1 ] && eps="ez1:--ep_2_--zero_1 epp:--ep_2_--pp_2 ez3:--ep_2_--zero_3"
run eref 1 $moe --save "$dir/eref/"
for c in $eps; do
    e=${c%%:*}
    set -- $(echo "${c#*:}" | tr _ ' ')
    run ${e}f 4 $moe "$@" --save-every 4 --save "$dir/${e}f/" &&
        run ${e}h 4 $moe "$@" --stop-at 4 --save "$dir/${e}h/" &&
        run ${e}h 4 --resume "$dir/${e}h" "$@" --save "$dir/${e}r/" &&
        exact ${e}h ${e}f && params ${e}r ${e}f
    [ -d "$dir/eref" ] && [ -d "$dir/${e}f" ] && {
        [ "$(bytes "$dir/${e}f")" = "$(bytes "$dir/eref")" ] && ok ||
            bad "${e}f: $(bytes "$dir/${e}f") bytes of files, one process's save $(bytes "$dir/eref")"
    }
done
# a background save's (--save-every) resume goes on as the run did
[ -d "$dir/ez1f" ] && run ez1b 4 --resume "$(ls -d "$dir"/ez1f/step-00000004-*)" --ep 2 \
    --zero 1 && later ez1b ez1f 4
[ $thin = 0 ] && [ -d "$dir/ez3f" ] && run ez3b 4 --resume "$(ls -d "$dir"/ez3f/step-00000004-*)" --ep 2 \
    --zero 3 && later ez3b ez3f 4
# at 8 ranks each rank's experts have a replica (dp 4 in each stage)
run e8 8 $moe --ep 2 --pp 2 --zero 1 --stop-at 6 --save "$dir/e8/" && {
    [ "$(bytes "$dir/e8")" = "$(bytes "$dir/eref")" ] && ok ||
        bad "e8: $(bytes "$dir/e8") bytes of files, one process's save $(bytes "$dir/eref")"
    run e81 1 --resume "$dir/e8" && same e81 eref
}
[ -d "$dir/ez1h" ] && run ex1 1 --resume "$dir/ez1h" && same ex1 eref
[ -d "$dir/etph" ] && run ex4 4 --resume "$dir/etph" --ep 4 && same ex4 eref
[ -d "$dir/epph" ] && run ext 4 --resume "$dir/epph" --ep 2 --tp 2 && same ext eref

# ---- divided experts under ZeRO 2 and 3 (ez2, ez3 above): at ep 2 over
# 4 ranks each expert has two replicas, which shard its state; each
# writes its shard (the files' bytes are one process's save's: every
# element once), the resume reads them back into each rank's shards
# bit-exact, also from a background save, and the ZeRO-3 one within 1e-5
# on one process; a single file (.wckpt, ZeRO 3) gathers each expert's
# shards from its replicas to the writer, and resumes bit-exact at its
# layout, within 1e-5 at one process and at ep 2 with ZeRO 1; through a pipeline (ep 2 x pp 2 x dp 4, 8 ranks) the
# replicas of each stage give their shards too
if [ $thin = 0 ] && run ez3w 4 $moe --ep 2 --zero 3 --stop-at 4 --save "$dir/ez3w.wckpt"
then
    run ez3w 4 --resume "$dir/ez3w.wckpt" --ep 2 --zero 3 --save "$dir/ez3wr/" &&
        exact ez3w ez3f && params ez3wr ez3f
    run ez3w1 1 --resume "$dir/ez3w.wckpt" && same ez3w1 eref
    run ez3wz 4 --resume "$dir/ez3w.wckpt" --ep 2 --zero 1 && same ez3wz eref
fi
[ -d "$dir/ez3h" ] && run ez3x 1 --resume "$dir/ez3h" && same ez3x eref
if [ $thin = 0 ] && run epz3 8 $moe --ep 2 --pp 2 --zero 3 --stop-at 6 --save "$dir/epz3.wckpt"
then
    run epz31 1 --resume "$dir/epz3.wckpt" && same epz31 eref
fi

# a single-file save whose gather fails on one rank (WEFT_TEST_SAVE_FAIL:
# the optimiser state's gather over the job, or a gather on the way to
# rank 0, without and with a pipeline) fails on every rank, each with an
# error of its own (no rank left waiting on another's data until that one
# is gone) and nothing written
# failed name ranks expect: every rank's error line and no file
failed() {
    if [ "$(grep -c "^\[[0-9]*\] weft-train: " "$dir/$1.out")" = "$2" ] &&
        grep -q "^\[0\] weft-train: $3" "$dir/$1.out" && [ ! -e "$dir/$1.wckpt" ]; then
        ok
    else
        bad "$1: a failed gather on one rank did not fail each rank with its own error"
        grep '^\[' "$dir/$1.out" | tail -n 6
    fi
}
for c in fo:1:optim:--zero_3 fs:1:send:--zero_3 fpo:2:optim:--pp_2_--zero_3 fps:1:send:--pp_2_--zero_3 \
    fpt:0:take:--pp_2_--zero_3; do
    e=${c%%:*}; f=${c#*:}; f=${f%:*}
    set -- $(echo "${c##*:}" | tr _ ' ')
    if WEFT_TEST_SAVE_FAIL=$f timeout 300 "$B/weftrun" -n 4 "$B/weft-train" $common $moe --ep 2 \
        "$@" --stop-at 4 --save "$dir/$e.wckpt" >"$dir/$e.out" 2>&1; then
        bad "$e: the save passed with a failed gather"
    else
        case $e in
        fps) failed $e 4 "a rank failed its part of the save" ;;
        fpt) failed $e 4 "cannot assemble stage 1" ;;
        fpo) failed $e 4 "gathering the optimiser state" ;;
        *) failed $e 4 "cannot gather the training state" ;;
        esac
    fi
done

# the ZeRO resume from each rank's own shard (the parameters' gathers
# going on while the optimiser state is read): a byte changed in rank 1's
# file fails both ranks, rank 1 naming the file, slice and tensor
bz=1
[ $thin = 1 ] && bz=3
# (bent2: the same from the disk, the files dropped from the page cache)
for b in bent1 bent2; do
    [ -d "$dir/half$bz" ] || break
    cp -r "$dir/half$bz" "$dir/$b"
    f=$(ls "$dir"/$b/step-*/rank-00001.bin)
    printf 'x' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
    [ $b = bent1 ] || cold "$dir/$b"
    if timeout 300 "$B/weftrun" -n 2 "$B/weft-train" $common --resume "$dir/$b" --zero $bz \
        >"$dir/$b.out" 2>&1; then
        bad "$b: an own-shard resume from a changed file passed"
    elif grep -q "^\[1\] weft-train: .*rank-00001.bin: slice [0-9]* (bytes .*) fails its CRC" \
        "$dir/$b.out" && grep -q "^\[0\] weft-train: data parallel set-up: " "$dir/$b.out"; then
        ok
    else
        bad "$b: own-shard resume from a changed file: not an error on each rank naming the file"
        grep '^\[' "$dir/$b.out" | tail -n 4
    fi
done

# ZeRO 2 with divided experts and tensor slices (ep 2 x tp 2): the
# sharded save's files hold one process's bytes, the resume at its layout
# is bit-exact
run etz2f 4 $moe --ep 2 --tp 2 --zero 2 --save "$dir/etz2f/" &&
    run etz2h 4 $moe --ep 2 --tp 2 --zero 2 --stop-at 4 --save "$dir/etz2h/" &&
    run etz2h 4 --resume "$dir/etz2h" --ep 2 --tp 2 --zero 2 --save "$dir/etz2r/" &&
    exact etz2h etz2f && params etz2r etz2f && {
        [ "$(bytes "$dir/etz2f")" = "$(bytes "$dir/eref")" ] && ok ||
            bad "etz2f: $(bytes "$dir/etz2f") bytes of files, one process's save $(bytes "$dir/eref")"
    }

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
