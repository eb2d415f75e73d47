#!/bin/sh
# The evaluation and --export in the training layout, against the same
# weights in one process: a tp 2 x pp 2 x dp 2 run at ZeRO 3 ends with the
# validation loss (relative 1e-5: the same sums in another order), the
# exact-match count and the answers one process generates from its exported
# weights (generated through the pipeline's stages and tensor parts), and its
# model.safetensors is byte for byte the one a single process exports from
# them; --eval-only at that layout (and at ZeRO 3 over 4 ranks, and an
# interleaved pipeline) prints one process's loss to 1e-5 and its sampled
# text (temperature 0.8, top-k 40). The memory-wall
# GPT (gpt:vocab=256,ctx=32,layers=8,heads=8,dim=256, 8 ranks as tp 2 x pp 2
# x dp 2 at ZeRO 3) trains, evaluates (its sample generated in the layout)
# and exports under --mem-limit 64M, saying what the evaluation held, and
# its export equals one process's.
# A Llama with experts exports as Mixtral (MixtralForCausalLM; its names,
# shapes and config checked): loaded back on one process and exported
# again it is the same bytes, and the same weights loaded and exported at
# ep 2, at ep 2 x tp 2 and at ep 2 with ZeRO 3 over 4 ranks are too; a run
# trained at ep 2 with ZeRO 2 exports what one process exports from it,
# with its validation loss to 1e-5; the expert options Mixtral has not are
# refused before the run, and a Mixtral directory with a sliding window
# or without an expert's tensor is refused naming it.
# Under sanitizers (TEST_SCALE > 1) the memory wall is left out.
# TEST_TIMEOUT(300)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common="--optim adamw --lr 0.003 --clip 1"
. "$(dirname "$0")/train_lib.sh"
gpt="--model gpt:vocab=256,ctx=32,layers=2,heads=2,dim=32 --data builtin --batch 8 --eval-prompts 40"

val() { # name field: the CSV's validation row (4: loss, 5: exact match)
    awk -F, -v f="$2" '$3 == "val" { v = $f } END { print v }' "$dir/$1.csv"
}
close() { # a b what: a and b within relative 1e-5
    if awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d
                                        exit !(a != "" && d <= 1e-5 * (b < 0 ? -b : b)) }'; then
        ok
    else
        bad "$3: $1, one process: $2"
    fi
}
lines() { # file pattern: the lead's lines that match, without weftrun's prefix
    sed 's/^\[0\] //' "$1" | grep -v '^\[' | grep -- "$2"
}
same_file() { # a b what
    if cmp -s "$1" "$2"; then ok; else bad "$3: $1 and $2 differ"; fi
}

# training at the layout; its final evaluation and export against one
# process's of the exported weights
run l8 8 $gpt --steps 4 --tp 2 --pp 2 --zero 3 --export "$dir/l8" &&
    run one 1 $gpt --init-from "$dir/l8" --eval-only --export "$dir/one" && {
        close "$(val l8 4)" "$(val one 4)" "final validation loss at tp 2 x pp 2 x dp 2, ZeRO 3"
        if [ "$(val l8 5)" = "$(val one 5)" ] && [ -n "$(val one 5)" ]; then ok; else
            bad "exact match at tp 2 x pp 2 x dp 2: $(val l8 5), one process: $(val one 5)"; fi
        lines "$dir/l8.out" 'right$\|wrong$' >"$dir/l8.ans"
        lines "$dir/one.out" 'right$\|wrong$' >"$dir/one.ans"
        if [ -s "$dir/one.ans" ] && cmp -s "$dir/l8.ans" "$dir/one.ans"; then ok; else
            bad "the answers generated at tp 2 x pp 2 x dp 2 differ from one process's"; fi
        same_file "$dir/l8/model.safetensors" "$dir/one/model.safetensors" "export"
        same_file "$dir/l8/config.json" "$dir/one/config.json" "config.json"
        [ -e "$dir/l8/model.safetensors.part" ] && bad "the export left its temporary file"
        run one0 1 $gpt --init-from "$dir/l8" --eval-only --eval-prompts 0
        lines "$dir/one0.out" '^sample' >"$dir/one0.sample"
        for l in "8 --tp 2 --pp 2 --zero 3" "4 --zero 3" "4 --pp 2 --schedule interleaved:2"; do
            n=${l%% *}; args=${l#"$n"}
            name=e$(echo "$l" | tr -dc '0-9')
            run "$name" "$n" $gpt --init-from "$dir/l8" --eval-only --eval-prompts 0 $args || continue
            close "$(val "$name" 4)" "$(val one 4)" "--eval-only at $n ranks ($args)"
            lines "$dir/$name.out" '^sample' >"$dir/$name.sample"
            if [ -s "$dir/one0.sample" ] && cmp -s "$dir/$name.sample" "$dir/one0.sample"; then ok
            else bad "the sample at $n ranks ($args) differs from one process's"; fi
        done
    }

# an export that cannot be written fails every rank, naming the path
: >"$dir/file"
if "$B/weftrun" -n 4 "$B/weft-train" $gpt --steps 1 --no-eval --zero 3 \
        --export "$dir/file/x" >"$dir/fail.out" 2>&1; then
    bad "--export into a file's path succeeded"
elif grep -q -- "--export.*$dir/file/x" "$dir/fail.out"; then
    ok
else
    bad "--export into a file's path: no message naming it"; tail -n 5 "$dir/fail.out" | sed 's/^/    /'
fi

# a mixture of experts as Mixtral
moe="--model llama:vocab=256,ctx=32,layers=2,heads=4,kv_heads=2,dim=32,ffn=24,experts=4,topk=2,aux=0.01,zloss=0.001 --data builtin --batch 8 --eval-prompts 0"
mixtral_names() { # dir: the header's names and shapes against Mixtral's
    python3 - "$1" <<'EOF' && ok || bad "$1: not Mixtral's names, shapes or config"
import json, struct, sys
f = open(sys.argv[1] + '/model.safetensors', 'rb')
head = json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))
head.pop('__metadata__', None)
want = {'model.embed_tokens.weight': [256, 32], 'model.norm.weight': [32],
        'lm_head.weight': [256, 32]}
for l in range(2):
    p = 'model.layers.%d.' % l
    want.update({p + 'input_layernorm.weight': [32], p + 'post_attention_layernorm.weight': [32],
                 p + 'self_attn.q_proj.weight': [32, 32], p + 'self_attn.k_proj.weight': [16, 32],
                 p + 'self_attn.v_proj.weight': [16, 32], p + 'self_attn.o_proj.weight': [32, 32],
                 p + 'block_sparse_moe.gate.weight': [4, 32]})
    for e in range(4):
        q = p + 'block_sparse_moe.experts.%d.' % e
        want.update({q + 'w1.weight': [24, 32], q + 'w3.weight': [24, 32],
                     q + 'w2.weight': [32, 24]})
got = {k: v['shape'] for k, v in head.items()}
if got != want or any(v['dtype'] != 'F32' for v in head.values()):
    print('names or shapes differ:', sorted(set(got) ^ set(want))[:4], file=sys.stderr)
    sys.exit(1)
cfg = json.load(open(sys.argv[1] + '/config.json'))
sys.exit(not (cfg['architectures'] == ['MixtralForCausalLM'] and cfg['model_type'] == 'mixtral'
              and cfg['num_local_experts'] == 4 and cfg['num_experts_per_tok'] == 2
              and cfg['intermediate_size'] == 24 and cfg['router_aux_loss_coef'] == 0.01))
EOF
}
run moe1 1 $moe --steps 3 --export "$dir/moe1" && {
    mixtral_names "$dir/moe1"
    run moe1b 1 $moe --init-from "$dir/moe1" --eval-only --export "$dir/moe1b" &&
        same_file "$dir/moe1/model.safetensors" "$dir/moe1b/model.safetensors" \
            "a mixture of experts loaded back and exported"
    for l in "2 --ep 2" "4 --ep 2 --tp 2" "4 --ep 2 --zero 3"; do
        n=${l%% *}; args=${l#"$n"}
        name=m$(echo "$l" | tr -dc '0-9')
        run "$name" "$n" $moe --init-from "$dir/moe1" --eval-only --export "$dir/$name" $args &&
            same_file "$dir/moe1/model.safetensors" "$dir/$name/model.safetensors" \
                "a mixture of experts loaded and exported at$args"
    done
}
run moez2 4 $moe --steps 3 --ep 2 --zero 2 --export "$dir/moez2" &&
    run moez2one 1 $moe --init-from "$dir/moez2" --eval-only --export "$dir/moez2one" && {
        same_file "$dir/moez2/model.safetensors" "$dir/moez2one/model.safetensors" \
            "the export at ep 2 with ZeRO 2"
        close "$(val moez2 4)" "$(val moez2one 4)" "the validation loss at ep 2 with ZeRO 2"
    }
refused() { # what args...: weft-train exits non-zero before the run, saying what
    what=$1
    shift
    if "$B/weft-train" $common --data builtin --batch 8 --steps 1 "$@" \
            --export "$dir/refused" >"$dir/refused.out" 2>&1; then
        bad "$* exported"
    elif grep -q -- "$what" "$dir/refused.out" && [ ! -e "$dir/refused" ]; then ok
    else bad "$* not refused before the run saying '$what'"; tail -n 3 "$dir/refused.out"; fi
}
m="llama:vocab=256,ctx=32,layers=2,heads=4,dim=32,ffn=24,experts=4,topk=2"
refused "router=sigmoid: Mixtral's router is a softmax" --model "$m,router=sigmoid"
refused "bias=1: the balancing bias" --model "$m,bias=1"
refused "shared=1: weft adds its shared experts' output as it is" --model "$m,shared=1"
refused "a GPT's GELU experts" --model "gpt:vocab=256,ctx=32,layers=2,heads=2,dim=32,experts=4,topk=2"
loads() { # what dir: --init-from dir fails naming what
    if "$B/weft-train" $moe --init-from "$2" --eval-only >"$dir/l.out" 2>&1; then
        bad "--init-from $2 loaded"
    elif grep -q -- "$1" "$dir/l.out"; then ok
    else bad "--init-from $2: no '$1'"; tail -n 3 "$dir/l.out"; fi
}
if [ -s "$dir/moe1/model.safetensors" ]; then
    mkdir "$dir/sw" "$dir/nox"
    sed 's/"sliding_window": null/"sliding_window": 16/' "$dir/moe1/config.json" >"$dir/sw/config.json"
    cp "$dir/moe1/model.safetensors" "$dir/sw/"
    loads '"sliding_window" is set' "$dir/sw"
    cp "$dir/moe1/config.json" "$dir/nox/"
    python3 - "$dir/moe1/model.safetensors" "$dir/nox/model.safetensors" <<'EOF' ||
import json, struct, sys
src = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', src[:8])[0]
head = json.loads(src[8:8 + n])
head.pop('model.layers.1.block_sparse_moe.experts.3.w2.weight')
h = json.dumps(head).encode()
h += b' ' * (-len(h) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(h)) + h + src[8 + n:])
EOF
        bad "python3 cannot drop a tensor"
    loads "no tensor model.layers.1.block_sparse_moe.experts.3.w2.weight" "$dir/nox"
fi

if [ "${TEST_SCALE:-1}" -le 1 ]; then
    # llm.c shards of bytes: a short validation shard keeps the wall's
    # evaluation small
    python3 - "$dir" "$(dirname "$0")/../../README.md" <<'EOF' || bad "python3 cannot write the shards"
import struct, sys
out, src = sys.argv[1], sys.argv[2]
text = open(src, 'rb').read()
def shard(path, toks):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = 20240520, 1, len(toks)
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', *hdr))
        f.write(struct.pack('<%dH' % len(toks), *toks))
shard(out + '/wall_train_000001.bin', list(text[:4000]))
shard(out + '/wall_val_000000.bin', list(text[4000:4000 + 32 * 12 + 1]))
EOF
    wall="--model gpt:vocab=256,ctx=32,layers=8,heads=8,dim=256 --data llmc:$dir/wall_train_000001.bin --seq 32 --batch 8"
    run wall 8 $wall --steps 1 --tp 2 --pp 2 --zero 3 --mem-limit 64M --export "$dir/wall" && {
        held=$(sed -n 's/.*evaluation in the training layout: at most \([0-9.]*\) MB.*/\1/p' "$dir/wall.out")
        if [ -n "$held" ] && awk -v h="$held" 'BEGIN { exit !(h <= 64 * 1.048576) }'; then ok; else
            bad "the memory wall's evaluation: held '$held' MB"; fi
        if grep -q '^\[0\] sample (temperature' "$dir/wall.out"; then ok; else
            bad "the memory wall: no sample generated in the layout"; fi
        run wall1 1 $wall --init-from "$dir/wall" --eval-only --export "$dir/wall1" && {
            same_file "$dir/wall/model.safetensors" "$dir/wall1/model.safetensors" "the wall's export"
            close "$(val wall 4)" "$(val wall1 4)" "the wall's validation loss"
        }
    }
fi
echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
