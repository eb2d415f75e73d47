/* weft-train's command line: --KEY VALUE and the flags, each handed to the
 * run's configuration, which checks it; --help. */
#include "train.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs(
        "usage: weft-train [options]\n"
        "  --model mlp|gpt|SPEC     mlp: IN-512-512-CLASSES; gpt: see --layers/--heads/--dim;\n"
        "                           SPEC: \"mlp:784-128-10\", \"gpt:vocab=256,ctx=32,...\",\n"
        "                           \"llama:vocab=V,ctx=T,layers=L,heads=H,kv_heads=G,dim=D,ffn=F\"\n"
        "  --data builtin|fashion-mnist|mnist|PATH|llmc:SHARDS[,VAL]\n"
        "                           builtin: generated images (mlp) or additions (gpt);\n"
        "                           PATH: an idx directory (mlp) or a token shard (gpt,\n"
        "                           llama); llmc: llm.c's shards (a file, folder or glob;\n"
        "                           validation from the _val ones)\n"
        "  --steps N | --epochs E   length (mlp default: 1 epoch; gpt: 1500 steps)\n"
        "  --batch B                global batch (mlp 256, gpt 32)\n"
        "  --optim sgd|adamw        (mlp sgd, gpt adamw)\n"
        "  --lr LR                  (sgd 0.1, adamw 3e-3)\n"
        "  --momentum M             sgd momentum (0.9)\n"
        "  --weight-decay WD        (sgd 0, adamw 0.01)\n"
        "  --schedule cosine|constant  cosine decays to --min-lr (lr/10) at the last step\n"
        "  --warmup N               linear warm-up steps (gpt 50)\n"
        "  --clip NORM              gradient norm clipping, 0 off (gpt 1)\n"
        "  --precision fp32|bf16    matmul precision\n"
        "  --seed S                 weights and data order (1)\n"
        "  --data-seed S            generator seed of the builtin data (1)\n"
        "  --seq T                  gpt tokens per sample (32)\n"
        "  --digits D               builtin addition operand digits (2; 3 needs more steps)\n"
        "  --format F               builtin addition lines: plain (12+345=357) or a list of\n"
        "                           padded (012+345=0357), reversed (12+345=753) and\n"
        "                           answer-loss (train on the answers only);\n"
        "                           default padded,reversed,answer-loss\n"
        "  --layers L --heads H --dim D   gpt shape (2, 4, 64)\n"
        "  --train-size N           builtin training samples (mlp 60000, gpt 100000)\n"
        "  --save CKPT              checkpoint at the end (and every --save-every N steps);\n"
        "                           DIR/ (ending in /): sharded, each rank its own file,\n"
        "                           --save-every's written in the background\n"
        "  --keep N                 a sharded --save keeps the newest N saves (0: all)\n"
        "  --save-cached            a sharded save writes through the page cache (default:\n"
        "                           straight to the disk, O_DIRECT, where the file system takes it)\n"
        "  --stop-at N              stop (and save) after step N of the planned run\n"
        "  --resume CKPT            continue a run (its options unless given again); a\n"
        "                           sharded DIR loads at any layout\n"
        "  --init-from DIR          start from a Hugging Face model folder (config.json and\n"
        "                           model.safetensors: GPT2LMHeadModel, LlamaForCausalLM\n"
        "                           or MixtralForCausalLM)\n"
        "  --export DIR             write the trained model there in the same form\n"
        "  --inspect CKPT           list a checkpoint's records (a DIR's too) and exit\n"
        "  --metrics FILE           CSV, one row per step and per evaluation\n"
        "  --log-every N            plain progress line period when not on a terminal\n"
        "  --threads N              matmul threads\n"
        "  --eval-prompts N         gpt exact-match problems (500)\n"
        "  --no-eval                skip the final evaluation\n"
        "  --eval-only              no training step: the validation (or test) loss of the\n"
        "                           model as it starts (fresh, --resume or --init-from) over\n"
        "                           every validation window, to 6 significant digits\n"
        "  --quiet                  no progress output\n"
        "  --bucket-mb MB           data parallel: gradient bucket size in MiB (25), or a\n"
        "                           size with its unit (512K)\n"
        "  --zero 0|1|2|3           ZeRO stage: shard optimiser state (1), + gradients (2),\n"
        "                           + parameters (3) over the ranks (0)\n"
        "  --accum K                micro-steps per step; communicate only on the last (1)\n"
        "  --pp P                   pipeline of P stages; data parallelism over the rest of\n"
        "                           the ranks (job rank = replica * P + stage)\n"
        "  --tp T                   tensor parallelism over T ranks (Megatron's layers);\n"
        "                           with --pp the job is tp x dp x pp\n"
        "  --ep E                   expert parallelism: a mixture of experts' experts over\n"
        "                           groups of E consecutive data-parallel ranks\n"
        "  --cp C                   context parallelism: each sequence over groups of C\n"
        "                           consecutive ranks (zig-zag chunks, attention as a ring\n"
        "                           of K/V); with tp, pp, dp, ZeRO, bf16, evaluation\n"
        "  --order tp-dp-pp         the ranks' order of the three, fastest first\n"
        "  --sp                     sequence parallelism over the tensor group (GPT, fp32)\n"
        "  --recompute              keep only each block's input; backward recomputes the\n"
        "                           rest (GPT: activations of one block, one more forward)\n"
        "  --micro-batches M        pipeline micro-batches per step (P)\n"
        "  --schedule gpipe|1f1b|interleaved:V|zb  the pipeline's schedule (1f1b); also\n"
        "                           --pp-schedule\n"
        "  --pp-partition auto|uniform|N,N,..  blocks per stage: auto balances measured\n"
        "                           block times under --pp-memory MB per stage (auto;\n"
        "                           MiB, or a size with its unit: 2G)\n"
        "  --layout auto            tp, pp, schedule, micro-batches, ZeRO and sp chosen by\n"
        "                           the planner (weft-sim plan) for this job's ranks\n"
        "  --mem-limit SIZE         a rank's memory budget: a layout whose training state\n"
        "                           does not fit is refused (naming one that would), and\n"
        "                           the peak resident memory is checked after step one;\n"
        "                           shared-memory rings are sized to it (WEFT_SHM_RING)\n"
        "                           SIZE: bytes, or a number with K, M, G or T, with or\n"
        "                           without iB (powers of 1024): 64M, 2GiB, 1.5G\n"
        "  --pp-costs FILE          write the block costs, measured and then scaled to the\n"
        "                           run's own chunk times (for weft-sim pipeline)\n"
        "  --sync MODE              full (default), local:H, diloco:H, gossip, stale:S,\n"
        "                           backup:B (each step takes the first N-B gradients)\n"
        "                           (docs/TRAINING.md); across clusters (docs/WAN.md):\n"
        "                           streaming:H:F[:T], hier:full/diloco:H,\n"
        "                           hier:full/streaming:H:F[:T]\n"
        "  --compress SPEC          fp16, bf16, int8, int4, topk:K or powersgd:R: the\n"
        "                           gradients (full sync) or the outer gradient (DiLoCo,\n"
        "                           streaming, hier) travel compressed\n"
        "  --outer-lr X             DiLoCo's and streaming's outer learning rate, in (0, 10]\n"
        "                           (0.7)\n"
        "  --outer-momentum X       their outer Nesterov momentum, in [0, 1) (0.9)\n"
        "  --batch-shares S0,S1,..  cluster k (WEFT_CLUSTER k) takes Sk samples of every\n"
        "                           global batch (they add up to --batch), weighed exactly\n"
        "                           (docs/CPN.md)\n"
        "  --speed X                emulate a device X times as fast (0 < X <= 1: each\n"
        "                           step's compute is stretched); under diloco:H and\n"
        "                           streaming a cluster whose step takes k times the\n"
        "                           shortest (samples / X) takes round(H / k) inner steps\n"
        "  --progress PATH          each cluster's first rank keeps PATH.K with its step,\n"
        "                           loss and seconds (weft-cpn status reads them)\n"
        "  --mode dp|ps             data parallel (dp, default) or parameter server (ps: under\n"
        "                           weftrun -n W --servers K; workers push gradients, pull\n"
        "                           parameters; servers hold them and run the optimiser)\n"
        "  --consistency bsp|ssp:S|asp  parameter-server consistency (bsp)\n"
        "  --straggle RANK:MS       rank RANK sleeps MS ms every step (a slow device);\n"
        "                           any:MS: one rank a step, chosen at random (jitter)\n"
        "  --elastic                (under weftrun --elastic) a rank that dies costs the step\n"
        "                           it was in, not the job; ranks that join are admitted at\n"
        "                           the next step (docs/TRAINING.md, \"Elastic training\");\n"
        "                           with diloco:H or hier:full/diloco:H a lost cluster is\n"
        "                           dropped at the outer step and rejoins at an outer-step\n"
        "                           boundary (docs/WAN.md, \"Churn\")\n"
        "  --kill-at RANK:STEP[:recover][,...]  tests: launch rank RANK kills itself (SIGKILL)\n"
        "                           as step STEP starts, or in the recovery from a failure there\n"
        "  --trace-samples PATH     tests: each rank appends the sample ids of every committed\n"
        "                           step to PATH.RANK (\"step id view\" lines)\n",
        f);
}

/* Options that take no value. */
static int is_flag(const char *key)
{
    static const char *const flags[] = { "no-eval", "eval-only", "sp", "recompute", "quiet",
                                         "elastic", "save-cached" };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strcmp(key, flags[i]) == 0)
            return 1;
    return 0;
}

void parse_args(int argc, char **argv, weft_run_config *cfg, tool_opts *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        const char *key = strncmp(a, "--", 2) == 0 ? a + 2 : NULL, *v = NULL;
        if (!key || (!is_flag(key) && i + 1 >= argc)) {
            usage(stderr);
            die("bad argument '%s'", a);
        }
        if (!is_flag(key))
            v = argv[++i];
        int rc = weft_run_config_set(cfg, key, v);
        if (rc == WEFT_ENOTSUP)
            usage(stderr);
        if (rc != 0)
            die("%s", weft_run_config_error(cfg));
        if (strcmp(key, "elastic") == 0)
            t->elastic = 1;
        uint64_t limit;
        if (strcmp(key, "mem-limit") == 0 &&
            weft_size_parse(v, 0, UINT64_MAX, &limit, NULL, 0) == 0)
            t->mem_limit = (double)limit;
    }
}

void fit_rings(const tool_opts *t)
{
    if (t->mem_limit <= 0 || getenv("WEFT_SHM_RING"))
        return;
    /* a rank maps a ring to and from each peer of each communicator it
     * uses, and the pages a ring has carried stay resident: at 2 MiB (the
     * default) a pipeline of 4-rank tensor groups held 8-17 MB in rings;
     * a 128th of the limit each keeps them near a tenth of it */
    unsigned long long ring = 2ull << 20;
    while (ring > (64ull << 10) && (double)ring > t->mem_limit / 128)
        ring >>= 1;
    char v[32];
    snprintf(v, sizeof v, "%llu", ring);
    setenv("WEFT_SHM_RING", v, 1);
}
