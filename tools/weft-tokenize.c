/* weft-tokenize: plain text -> token shard (byte-level tokens), and a
 * look inside existing shards.
 *
 *   weft-tokenize -o OUT.tok FILE...   (FILE "-" reads stdin)
 *   weft-tokenize --info SHARD.tok
 */
#include "cli_args.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-tokenize -o OUT.tok FILE...   concatenate text files (- = stdin)\n"
               "                                        into one shard of byte tokens\n"
               "       weft-tokenize --info SHARD.tok   print a shard's header and a preview\n");
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

int main(int argc, char **argv)
{
    const char *out = NULL;
    int first = 1;
    if (argc == 3 && strcmp(argv[1], "--info") == 0)
        return info(argv[2]);
    while (first < argc && argv[first][0] == '-' && argv[first][1]) {
        if (strcmp(argv[first], "-o") == 0 && first + 1 < argc) {
            out = argv[first + 1];
            first += 2;
        } else if (strcmp(argv[first], "-h") == 0 || strcmp(argv[first], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!out || first >= argc) {
        usage(stderr);
        return 2;
    }
    /* before reading what may be a long stdin */
    char why[4200];
    if (cli_path_problem(out, 0, 1, why, sizeof why)) {
        fprintf(stderr, "weft-tokenize: -o %s: %s\n", out, why);
        return 1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (int i = first; i < argc; i++) {
        int std = strcmp(argv[i], "-") == 0;
        FILE *in = std ? stdin : fopen(argv[i], "rb");
        if (!in) {
            perror(argv[i]);
            free(text);
            return 1;
        }
        int rc = slurp(in, &text, &len, &cap);
        if (!std)
            fclose(in);
        if (rc != 0) {
            fprintf(stderr, "weft-tokenize: %s: read failed\n", argv[i]);
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
