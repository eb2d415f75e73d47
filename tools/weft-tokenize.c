/* weft-tokenize: text -> tokens, in llm.c's shard format or weft's own,
 * and back.
 *
 *   weft-tokenize --encoding gpt2|bytes [-o OUT.bin] FILE...   llm.c shard
 *   weft-tokenize --encoding gpt2 --ids FILE...                 ids, one a line
 *   weft-tokenize [--encoding gpt2|bytes] --decode SHARD.bin    text to stdout
 *   weft-tokenize -o OUT.tok FILE...       weft shard of byte tokens (FILE "-": stdin)
 *   weft-tokenize --info SHARD.tok
 */
#include "cli_args.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-tokenize --encoding gpt2|bytes [-o OUT.bin] FILE...\n"
        "           tokenize each FILE (- = stdin) as one document into an llm.c token\n"
        "           shard (magic 20240520, version 1, uint16 tokens); with gpt2 each\n"
        "           document is preceded by <|endoftext|> (50256), as llm.c's data\n"
        "           preparation does. OUT defaults to the first FILE with .bin\n"
        "           for its extension.\n"
        "       weft-tokenize --encoding gpt2|bytes --ids FILE...\n"
        "           print each FILE's tokens, one a line, no <|endoftext|>\n"
        "       weft-tokenize [--encoding gpt2|bytes] --decode SHARD.bin\n"
        "           an llm.c shard back to text on stdout (gpt2 unless told)\n"
        "       weft-tokenize -o OUT.tok FILE...\n"
        "           concatenate text files into one weft shard of byte tokens\n"
        "       weft-tokenize --info SHARD.tok\n"
        "           print a weft shard's header and a preview\n"
        "options:\n"
        "  --encoding E    gpt2 (GPT-2's BPE, as tiktoken's \"gpt2\") or bytes (a token a byte)\n"
        "  --bpe-dir DIR   where encoder.json and vocab.bpe are (default: $WEFT_BPE_DIR,\n"
        "                  else the installed or build folder's copy: make tokenizer-data)\n"
        "  -o OUT          the shard to write\n"
        "  --ids           token ids to stdout instead of a shard\n"
        "  --decode SHARD  shard to text\n"
        "  --info SHARD    a weft shard's header\n"
        "  -h, --help      this text\n");
}

/* Appends the whole stream to *buf. */
static int slurp(FILE *in, char **buf, size_t *len, size_t *cap)
{
    for (;;) {
        if (*cap - *len < 65536) {
            size_t ncap = *cap ? *cap * 2 : 1 << 20;
            char *nb = realloc(*buf, ncap);
            if (!nb)
                return -1;
            *buf = nb;
            *cap = ncap;
        }
        size_t r = fread(*buf + *len, 1, *cap - *len, in);
        *len += r;
        if (r == 0)
            return ferror(in) ? -1 : 0;
    }
}

/* The whole of path ("-": stdin) into *buf (malloc'ed). */
static int read_input(const char *path, char **buf, size_t *len)
{
    size_t cap = 0;
    int std = strcmp(path, "-") == 0;
    FILE *in = std ? stdin : fopen(path, "rb");
    *buf = NULL;
    *len = 0;
    if (!in) {
        perror(path);
        return 1;
    }
    int rc = slurp(in, buf, len, &cap);
    if (!std)
        fclose(in);
    if (rc != 0) {
        fprintf(stderr, "weft-tokenize: %s: read failed\n", path);
        free(*buf);
        *buf = NULL;
        return 1;
    }
    return 0;
}

static int info(const char *path)
{
    int32_t *t;
    size_t n;
    uint32_t vocab;
    char why[4200];
    if (cli_path_problem(path, 0, 0, why, sizeof why)) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", path, why);
        return 1;
    }
    int rc = weft_tokshard_read(path, &t, &n, &vocab);
    if (rc != 0) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", path,
                rc == WEFT_EIO ? "not a token shard, or a truncated or corrupted one"
                               : weft_strerror(rc));
        return 1;
    }
    printf("%s: token shard version %d, vocabulary %u, %zu tokens (CRC ok)\n", path,
           WEFT_TOKSHARD_VERSION, vocab, n);
    if (vocab <= WEFT_BYTE_VOCAB) {
        size_t k = n < 200 ? n : 200;
        char *s = malloc(k + 1);
        if (s) {
            weft_bytes_decode(t, k, s);
            s[k] = 0;
            printf("preview: ");
            for (size_t i = 0; i < k; i++)
                putchar(s[i] == '\n' ? ' ' : (s[i] >= 32 && s[i] < 127) ? s[i] : '.');
            putchar('\n');
            free(s);
        }
    }
    free(t);
    return 0;
}

/* The original mode: every FILE's bytes into one weft shard. */
static int bytes_tokshard(const char *out, char **files, int nfiles)
{
    /* before reading what may be a long stdin */
    char why[4200];
    if (cli_path_problem(out, 0, 1, why, sizeof why)) {
        fprintf(stderr, "weft-tokenize: -o %s: %s\n", out, why);
        return 1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < nfiles; i++) {
        int std = strcmp(files[i], "-") == 0;
        FILE *in = std ? stdin : fopen(files[i], "rb");
        if (!in) {
            perror(files[i]);
            free(text);
            return 1;
        }
        int rc = slurp(in, &text, &len, &cap);
        if (!std)
            fclose(in);
        if (rc != 0) {
            fprintf(stderr, "weft-tokenize: %s: read failed\n", files[i]);
            free(text);
            return 1;
        }
    }
    int32_t *tokens = malloc((len ? len : 1) * sizeof *tokens);
    if (!tokens) {
        fprintf(stderr, "weft-tokenize: out of memory\n");
        free(text);
        return 1;
    }
    size_t n = weft_bytes_encode(text, len, tokens);
    int rc = weft_tokshard_write(out, tokens, n, WEFT_BYTE_VOCAB);
    free(tokens);
    free(text);
    if (rc != 0) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", out, weft_strerror(rc));
        return 1;
    }
    printf("%s: %zu tokens (byte-level, vocabulary %d)\n", out, n, WEFT_BYTE_VOCAB);
    return 0;
}

typedef struct {
    int gpt2;        /* else bytes */
    weft_bpe *bpe;   /* gpt2 */
    const char *out; /* shard to write, or NULL with ids */
    int ids;
} job;

/* One document's tokens into *t (room for n + 1); the count. */
static int tokenize(job *j, const char *text, size_t n, int32_t *t, size_t *count)
{
    if (!j->gpt2) {
        *count = weft_bytes_encode(text, n, t);
        return 0;
    }
    t[0] = weft_bpe_eot(j->bpe);
    int rc = weft_bpe_encode(j->bpe, text, n, 0, t + 1, n, count);
    *count += 1;
    return rc;
}

static int print_ids(const int32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (printf("%d\n", t[i]) < 0)
            return 1;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each FILE a document: into the shard j->out, or its ids to stdout. */
static int encode_files(job *j, char **files, int nfiles)
{
    weft_llmc_writer *w = NULL;
    int rc = j->out ? weft_llmc_writer_open(&w, j->out, 2) : 0;
    if (rc) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", j->out, weft_strerror(rc));
        return 1;
    }
    uint64_t total = 0, bytes = 0;
    double secs = 0;
    int bad = 0;
    for (int i = 0; i < nfiles && !bad; i++) {
        char *text;
        size_t n, count = 0;
        if (read_input(files[i], &text, &n) != 0) {
            bad = 1;
            break;
        }
        int32_t *t = malloc((n + 1) * sizeof *t);
        double t0 = now();
        rc = t ? tokenize(j, text, n, t, &count) : WEFT_ENOMEM;
        secs += now() - t0;
        /* --ids leaves out the separator: the text's own tokens */
        int skip = j->gpt2 && j->ids && count > 0;
        if (rc == 0 && w)
            rc = weft_llmc_writer_put(w, t, count);
        if (rc == 0 && j->ids && print_ids(t + skip, count - skip) != 0)
            rc = WEFT_EIO;
        if (rc) {
            fprintf(stderr, "weft-tokenize: %s: %s\n", files[i], weft_strerror(rc));
            bad = 1;
        }
        total += count;
        bytes += n;
        free(t);
        free(text);
    }
    if (w) {
        rc = weft_llmc_writer_close(w);
        if (rc && !bad) {
            fprintf(stderr, "weft-tokenize: %s: %s\n", j->out, weft_strerror(rc));
            bad = 1;
        }
    }
    if (!bad && j->out)
        printf("%s: %llu tokens from %d document%s (%s, uint16), %.1f MB/s\n", j->out,
               (unsigned long long)total, nfiles, nfiles == 1 ? "" : "s",
               j->gpt2 ? "gpt2" : "bytes", secs > 0 ? (double)bytes / secs / 1e6 : 0.0);
    return bad;
}

/* Little-endian tokens of width tb from p into t. */
static void unpack(const unsigned char *p, size_t n, int tb, int32_t *t)
{
    for (size_t i = 0; i < n; i++, p += tb)
        t[i] = tb == 2 ? (int32_t)(p[0] | p[1] << 8)
                       : (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                   (uint32_t)p[3] << 24);
}

/* The tokens of n to text on stdout. */
static int emit(job *j, const int32_t *t, size_t n, char *text, size_t cap)
{
    size_t len = 0;
    if (j->gpt2) {
        int rc = weft_bpe_decode(j->bpe, t, n, text, cap, &len);
        if (rc)
            return rc;
    } else {
        for (size_t i = 0; i < n; i++)
            if (t[i] < 0 || t[i] >= WEFT_BYTE_VOCAB)
                return WEFT_EINVAL;
        len = weft_bytes_decode(t, n, text);
    }
    return fwrite(text, 1, len, stdout) == len ? 0 : WEFT_EIO;
}

static int decode_shard(job *j, const char *path)
{
    char why[4200];
    weft_llmc_header h;
    if (cli_path_problem(path, 0, 0, why, sizeof why)) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", path, why);
        return 1;
    }
    if (weft_llmc_header_read(path, &h, why, sizeof why) != 0) {
        fprintf(stderr, "weft-tokenize: %s: %s\n", path, why);
        return 1;
    }
    FILE *f = fopen(path, "rb");
    enum { CHUNK = 1 << 16 };
    unsigned char *raw = malloc((size_t)CHUNK * 4);
    int32_t *t = malloc(CHUNK * sizeof *t);
    size_t cap = (size_t)CHUNK * 256; /* GPT-2's longest token is 128 bytes */
    char *text = malloc(cap);
    int rc = f && raw && t && text && fseek(f, WEFT_LLMC_HEADER_BYTES, SEEK_SET) == 0
             ? 0 : WEFT_EIO;
    for (uint64_t left = h.count; rc == 0 && left > 0;) {
        size_t n = left < CHUNK ? (size_t)left : CHUNK;
        if (fread(raw, (size_t)h.token_bytes, n, f) != n) {
            rc = WEFT_EIO;
            break;
        }
        unpack(raw, n, h.token_bytes, t);
        rc = emit(j, t, n, text, cap);
        left -= n;
    }
    if (f)
        fclose(f);
    free(raw);
    free(t);
    free(text);
    if (rc)
        fprintf(stderr, "weft-tokenize: %s: %s\n", path,
                rc == WEFT_EINVAL ? "a token outside the encoding's vocabulary"
                                  : weft_strerror(rc));
    return rc != 0;
}

/* OUT for --encoding without -o: the first FILE with .bin for its
 * extension (its folder kept). */
static char *default_out(const char *first)
{
    size_t n = strlen(first);
    const char *slash = strrchr(first, '/'), *dot = strrchr(first, '.');
    if (dot && (!slash || dot > slash + 1))
        n = (size_t)(dot - first);
    char *out = malloc(n + 5);
    if (out) {
        memcpy(out, first, n);
        memcpy(out + n, ".bin", 5);
    }
    return out;
}

typedef struct {
    const char *encoding, *out, *bpe_dir, *decode, *info;
    int ids, first;
} options;

/* 0, 1 (stop: exit 0, help printed) or -1 (usage error). */
static int parse(int argc, char **argv, options *o)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        const char *a = argv[i];
        const char **val = strcmp(a, "-o") == 0            ? &o->out
                           : strcmp(a, "--encoding") == 0 ? &o->encoding
                           : strcmp(a, "--bpe-dir") == 0  ? &o->bpe_dir
                           : strcmp(a, "--decode") == 0   ? &o->decode
                           : strcmp(a, "--info") == 0     ? &o->info
                                                          : NULL;
        if (val && i + 1 < argc) {
            *val = argv[++i];
        } else if (strcmp(a, "--ids") == 0) {
            o->ids = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        } else {
            return -1;
        }
    }
    o->first = i;
    if (o->encoding && strcmp(o->encoding, "gpt2") != 0 && strcmp(o->encoding, "bytes") != 0) {
        fprintf(stderr, "weft-tokenize: --encoding %s: expected gpt2 or bytes\n", o->encoding);
        return -1;
    }
    int files = i < argc;
    if (o->info || o->decode)
        return (o->info && o->decode) || files || o->out || o->ids || (o->info && o->encoding)
               ? -1 : 0;
    if (!files || (o->ids && o->out) || (!o->encoding && (o->ids || !o->out)))
        return -1;
    return 0;
}

static int run(options *o, char **files, int nfiles)
{
    job j = { !o->encoding || strcmp(o->encoding, "gpt2") == 0, NULL, NULL, o->ids };
    char *out = NULL;
    if (!o->decode && !o->ids) {
        out = o->out ? NULL : default_out(files[0]);
        j.out = o->out ? o->out : out;
        if (!o->out && strcmp(files[0], "-") == 0) {
            fprintf(stderr, "weft-tokenize: reading stdin: name the shard with -o\n");
            return 2;
        }
        char why[4200];
        if (!j.out || cli_path_problem(j.out, 0, 1, why, sizeof why)) {
            fprintf(stderr, "weft-tokenize: -o %s: %s\n", j.out ? j.out : "?",
                    j.out ? why : "out of memory");
            free(out);
            return 1;
        }
    }
    if (j.gpt2) {
        char why[4200];
        if (weft_bpe_open(&j.bpe, o->bpe_dir, why, sizeof why) != 0) {
            fprintf(stderr, "weft-tokenize: %s\n", why);
            free(out);
            return 1;
        }
    }
    int rc = o->decode ? decode_shard(&j, o->decode) : encode_files(&j, files, nfiles);
    weft_bpe_free(j.bpe);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    options o = { 0 };
    int p = parse(argc, argv, &o);
    if (p != 0) {
        if (p < 0)
            usage(stderr);
        return p < 0 ? 2 : 0;
    }
    if (o.info)
        return info(o.info);
    if (!o.encoding && !o.decode)
        return bytes_tokshard(o.out, argv + o.first, argc - o.first);
    return run(&o, argv + o.first, argc - o.first);
}
