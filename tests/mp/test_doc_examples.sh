#!/bin/sh
# Every example command of README.md, docs/TRAINING.md and docs/WAN.md that
# starts weftrun or weft-train runs, read from the documents themselves, so
# an example added there is tested without anyone adding it here. An
# example is a line of a code block (fenced, or indented four spaces) or an
# inline `code` span that begins, after an optional "$ " and VAR=value
# words, with weftrun or weft-train (build/ or not); a line ending in "\"
# goes on on the next. Each runs as written, from this build, with
# "--stop-at 3 --no-eval" after its weft-train (a few steps of the run it
# plans: its length, batch and schedule stay the document's), and must end
# with status 0. An example that cannot run here is skipped by one of the
# rules of skip_reason below, and the skips are counted.
# TEST_TIMEOUT(600)
B=${BUILD:-build}
B=$(cd "$B" && pwd) || exit 1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0; skipped=0
DOCS="README.md docs/TRAINING.md docs/WAN.md"
scale=${TEST_SCALE:-1}

# FILE:LINE, a tab and the command, one example a line.
extract() {
    for f in $DOCS; do
        awk -v file="$f" '
        function start(s) {
            sub(/^[ \t]*(\$ )?/, "", s)
            while (match(s, /^[A-Za-z_][A-Za-z_0-9]*=[^ ]* /))
                s = substr(s, RLENGTH + 1)
            return s ~ /^(build\/)?(weftrun|weft-train)( |$)/
        }
        /^[ \t]*```/ { fence = !fence; next }
        cont { cmd = cmd " " $0; at_end() ; next }
        fence || /^    / {
            if (start($0)) { cmd = $0; where = FNR; at_end() }
            next
        }
        {   # inline spans of prose
            line = $0
            while (match(line, /`[^`]+`/)) {
                span = substr(line, RSTART + 1, RLENGTH - 2)
                line = substr(line, RSTART + RLENGTH)
                if (start(span))
                    print file ":" FNR "\tinline\t" span
            }
        }
        function at_end() {
            if (cmd ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, "", cmd); cont = 1; return }
            cont = 0
            sub(/^[ \t]*(\$ )?/, "", cmd)
            sub(/[ \t]+#.*$/, "", cmd)
            gsub(/[ \t]+/, " ", cmd)
            print file ":" where "\tblock\t" cmd
        }' "$f"
    done
}

# Why example $2 (of kind $1: block or inline) cannot run here; empty: it can.
skip_reason() {
    kind=$1 cmd=$2
    # a synopsis, not a command: [optional] parts, a|b choices, "..." and
    # words in capitals that stand for a value (N, MIN:MAX, PATH, Z)
    case "$cmd" in
    *'['*|*']'*|*'|'*|*'…'*|*'...'*) echo "placeholders"; return ;;
    esac
    for w in $(echo "$cmd" | tr ' :=,' '\n\n\n\n'); do
        case "$w" in
        *[!A-Z]*|'') ;;
        *) echo "placeholder $w"; return ;;
        esac
    done
    # other hosts over ssh: this test has one
    case "$cmd" in *--hosts*) echo "--hosts (ssh)"; return ;; esac
    # a data set that is downloaded or a file of the reader's
    if echo "$cmd" | grep -q -- '--data ' && ! echo "$cmd" | grep -q -- '--data builtin'; then
        echo "data that is not builtin"; return
    fi
    # weftrun starting the reader's own program (./app), not a weft tool
    case "$cmd" in
    *weftrun*)
        tool=$(echo "$cmd" | tr ' ' '\n' | grep -E '^(build/)?weft-[a-z]+$|^\./' | head -n 1)
        case "$tool" in
        ''|./*) echo "runs the reader's own program"; return ;;
        esac
        ;;
    esac
    # prose naming an option (`weft-train --elastic`), not a run: an inline
    # span is run when it has a launcher or a --model
    if [ "$kind" = inline ] && ! echo "$cmd" | grep -qE 'weftrun|--model'; then
        echo "an option named in prose"; return
    fi
}

extract >"$dir/examples"
n=0
while IFS="$(printf '\t')" read -r where kind cmd; do
    n=$((n + 1))
    why=$(skip_reason "$kind" "$cmd")
    if [ -n "$why" ]; then
        skipped=$((skipped + 1))
        echo "skip $where ($why): $cmd"
        continue
    fi
    # this build's tools; a few steps of the run the example plans
    run=$(echo "$cmd" | sed -E \
        -e "s#(^| )(build/)?(weftrun|weft-train|weft-tune|weft-bench|weft-psbench|weft-sim)( |$)#\1$B/\3\4#g" \
        -e "s#(^| )(build/)?(weftrun|weft-train|weft-tune|weft-bench|weft-psbench|weft-sim)( |$)#\1$B/\3\4#g")
    case "$run" in *"$B/weft-train"*) run="$run --stop-at 3 --no-eval" ;; esac
    log="$dir/ex$n.log"
    # sanitizer builds (TEST_SCALE > 1) run that much slower
    WEFT_TIMEOUT=$((30 * scale)) timeout -k 5 $((150 * scale)) sh -c "$run" </dev/null >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok   $where: $cmd"
    else
        failed=$((failed + 1))
        echo "FAIL $where (exit $rc): $cmd"
        tail -n 8 "$log" | sed 's/^/    /'
    fi
done <"$dir/examples"
# the documents are read: an extraction that finds nothing is a failure
if [ $((passed + failed)) -lt 10 ]; then
    failed=$((failed + 1))
    echo "FAIL only $((passed + failed - 1)) runnable examples found in $DOCS"
fi
echo "$skipped examples skipped, $((passed + failed)) run"
echo "summary: $passed passed, $failed failed"
