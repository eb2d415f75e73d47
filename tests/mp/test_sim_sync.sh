#!/bin/sh
# weftrun -n N weft-sim sync, the planner's probe of shared cores: at 4
# ranks and at 3 (one without a pair) it prints the two calibration lines
# weft-sim plan --calib reads, "sync N SECONDS" (>= 0), "chain N CORES"
# (more than 0, no more than the cores this process may use) and "msgcpu N
# SECONDS PER_SECOND" (>= 0), and a plan
# from a file holding them says it used them; one rank alone is refused.
# With --model, a tensor group's slices: a GPT of 2 heads at batch 4 on 4
# ranks is cut by tp 2 only, its groups' micro-batches of 2 sequences (dp
# 2) and of 2 and 1 (pp 2, m 2 and 4), with and without sequence
# parallelism, 3 kinds each: 12 "tpblock" lines; on 3 ranks none. Where
# the ranks outnumber the cores, also each rank's whole blocks (TP 1) and
# a rank's CPU in a gradient all-reduce ("arcpu N DP FLOATS SECONDS").
# Tiny pieces of work: the figures are not judged, only their form.
# TEST_TIMEOUT(120)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
cores=$(nproc)

M=gpt:vocab=64,ctx=8,layers=1,heads=2,dim=16
for n in 4 3; do
    if "$B/weftrun" -n $n "$B/weft-sim" sync --work-us 100 --iters 4 --model $M --batch 4 \
            </dev/null >"$dir/out$n" 2>&1; then
        ok
    else
        bad "weft-sim sync at $n ranks: exit $?"; tail -n 5 "$dir/out$n" | sed 's/^/    /'
    fi
    sed -n 's/^\[0\] //; /^sync /p; /^chain /p; /^msgcpu /p; /^tpblock /p' "$dir/out$n" >"$dir/cal$n"
    want=0
    [ $n = 4 ] && want=12
    if awk -v want=$want -v m=$M '
            $1 == "tpblock" && $2 == m && $3 == 2 && ($4 == 0 || $4 == 1) &&
                ($5 == 1 || $5 == 2) && $6 == 8 && $7 >= 0 && $7 <= 2 &&
                $8 + 0 > 0 && $9 + 0 >= 0 && $10 + 0 >= 0 { k[$4 " " $5 " " $7]++ }
            $1 == "tpblock" && $3 == 2 { all++ }
            END { exit !(all == want && length(k) == want) }' "$dir/cal$n"; then
        ok
    else
        bad "weft-sim sync --model at $n ranks: not $want tpblock lines of tp 2"
        grep tpblock "$dir/out$n" | sed 's/^/    /'
    fi
    # more ranks than cores: each rank's whole blocks too (TP 1, SP 0), at
    # the one micro-batch size the layouts of tp 1 use (1 sequence at 4
    # ranks, 2 at 3), the 3 kinds, RANKS n
    want=0
    [ $n -gt "$cores" ] && want=3
    if awk -v want=$want -v m=$M -v n=$n '
            $1 == "tpblock" && $3 == 1 { all++ }
            $1 == "tpblock" && $2 == m && $3 == 1 && $4 == 0 && $5 == (n == 4 ? 1 : 2) &&
                $6 == 8 && $7 >= 0 && $7 <= 2 && $8 + 0 > 0 && $11 == n { k[$7]++ }
            END { exit !(all == want && length(k) == want) }' "$dir/cal$n"; then
        ok
    else
        bad "weft-sim sync --model at $n ranks, $cores cores: not $want tpblock lines of tp 1"
        grep tpblock "$dir/out$n" | sed 's/^/    /'
    fi
    if awk -v n=$n -v cores="$cores" '
            $1 == "sync" && $2 == n && $3 + 0 >= 0 { s++ }
            $1 == "chain" && $2 == n && $3 + 0 > 0 && $3 + 0 <= cores { c++ }
            $1 == "msgcpu" && $2 == n && $3 + 0 >= 0 && $4 + 0 >= 0 { m++ }
            END { exit !(s == 1 && c == 1 && m == 1) }' "$dir/cal$n"; then
        ok
    else
        bad "weft-sim sync at $n ranks: not one sync, one chain and one msgcpu line"
        sed 's/^/    /' "$dir/out$n"
    fi
    # more ranks than cores: a rank's CPU in a gradient all-reduce, for
    # each data-parallel size dividing the ranks (2 and 4 at 4 ranks, 3 at
    # 3), at two sizes each
    want=0
    [ $n -gt "$cores" ] && want=$([ $n = 4 ] && echo 4 || echo 2)
    if sed -n 's/^\[0\] //; /^arcpu /p' "$dir/out$n" | awk -v want=$want -v n=$n '
            { all++ }
            $2 == n && $3 >= 2 && $3 <= n && n % $3 == 0 && $4 + 0 > 0 && $5 + 0 >= 0 { k[$3 " " $4]++ }
            END { exit !(all == want && length(k) == want) }'; then
        ok
    else
        bad "weft-sim sync --model at $n ranks, $cores cores: not $want arcpu lines"
        grep arcpu "$dir/out$n" | sed 's/^/    /'
    fi
done

if "$B/weft-sim" plan --model gpt:vocab=64,ctx=8,layers=1,heads=2,dim=16 --batch 4 --ranks 4 \
        --calib "$dir/cal4" >"$dir/plan" 2>&1 &&
        grep -Eq "^# inputs: .*cores: [0-9]* measured.*sync on shared cores: [0-9.e-]* ms, a chain [0-9.e-]* cores at 4 ranks(, [0-9.e+-]* us of CPU a message's end)?; tensor-parallel slices: 12 shapes measured" "$dir/plan"; then
    ok
else
    bad "weft-sim plan did not read the probe's lines"; head -n 3 "$dir/plan" | sed 's/^/    /'
fi

if "$B/weft-sim" sync >"$dir/alone" 2>&1; then
    bad "weft-sim sync ran with one rank"
elif grep -q "one rank has no pair" "$dir/alone"; then
    ok
else
    bad "weft-sim sync alone: no message"; cat "$dir/alone" | sed 's/^/    /'
fi

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
