/* GPT-2's tokenizer (weft_bpe_*): token ids as js-tiktoken's "gpt2" gives
 * them for contractions, spaces, runs of white space, digits, punctuation,
 * letters beyond ASCII with their marks, emoji, a long word and a long
 * number (the heap's path); <|endoftext|> as text and as the special
 * token; invalid UTF-8, empty input, decoding, bad arguments, missing and
 * damaged tables; the pre-tokenizer's pieces; the heap merge against the
 * plain scan. Without the tables (make tokenizer-data) every case that
 * needs them says it skipped. */
#include "test.h"
#include "train/bpe.h"
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static weft_bpe *bpe;
static char open_why[4200];

TEST_INIT
{
    if (weft_bpe_open(&bpe, NULL, open_why, sizeof open_why) != 0) {
        bpe = NULL;
        printf("skipped: no tokenizer data (make tokenizer-data): %s\n", open_why);
    }
}

static int have(void)
{
    if (!bpe)
        printf("skipped: no tokenizer data (make tokenizer-data)\n");
    return bpe != NULL;
}

static int have_unicode(void)
{
    if (!weft_bpe_unicode())
        printf("skipped: built without UnicodeData.txt (apt-get install unicode-data)\n");
    return have() && weft_bpe_unicode();
}

/* Encodes text (flags) and checks the ids against want, then that they
 * decode back to the text. */
static void expect(const char *text, unsigned flags, const int32_t *want, size_t nwant)
{
    size_t n = strlen(text), count = 0;
    int32_t *t = malloc((n + 1) * sizeof *t);
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK(weft_bpe_encode(bpe, text, n, flags, t, n, &count) == 0);
    int same = count == nwant && memcmp(t, want, count * sizeof *t) == 0;
    CHECKF(same, "\"%s\": %zu tokens, want %zu", text, count, nwant);
    for (size_t i = 0; !same && i < count && i < nwant; i++)
        if (t[i] != want[i]) {
            fprintf(stderr, "    first difference at %zu: %d, want %d\n", i, t[i], want[i]);
            break;
        }
    char *back = malloc(n + 1);
    size_t len = 0;
    CHECK(back && weft_bpe_decode(bpe, t, count, back, n, &len) == 0);
    CHECK(back && len == n && memcmp(back, text, n) == 0);
    free(back);
    free(t);
}

#define EXPECT(text, flags, ...) do { \
        static const int32_t want_[] = { __VA_ARGS__ }; \
        expect(text, flags, want_, sizeof want_ / sizeof *want_); \
    } while (0)

TEST(vocabulary)
{
    if (!have())
        return;
    CHECK(weft_bpe_vocab(bpe) == 50257);
    CHECK(weft_bpe_eot(bpe) == 50256);
    char text[64];
    size_t len;
    int32_t t[] = { 15496, 995, 50256 };
    CHECK(weft_bpe_decode(bpe, t, 3, text, sizeof text, &len) == 0);
    CHECK(len == 24 && memcmp(text, "Hello world<|endoftext|>", 24) == 0);
}

TEST(contractions)
{
    if (!have())
        return;
    EXPECT("I'm sure you're right: we've seen they'll say she'd go, isn't it? DON'T", 0,
           40, 1101, 1654, 345, 821, 826, 25, 356, 1053, 1775, 484, 1183, 910, 673, 1549, 467,
           11, 2125, 470, 340, 30, 23917, 6, 51);
}

TEST(spaces_before_words)
{
    if (!have())
        return;
    EXPECT("Hello world, hello  world", 0, 15496, 995, 11, 23748, 220, 995);
}

TEST(runs_of_white_space)
{
    if (!have())
        return;
    EXPECT("a  b   c\n\n\nd \n e\t\tf   ", 0,
           64, 220, 275, 220, 220, 269, 628, 198, 67, 220, 198, 304, 197, 197, 69, 220, 220, 220);
}

TEST(digits)
{
    if (!have())
        return;
    EXPECT("12345 3.14159 2026-12-06 0x7fff 1000000", 0,
           10163, 2231, 513, 13, 1415, 19707, 1160, 2075, 12, 1065, 12, 3312, 657, 87, 22, 20972,
           1802, 2388);
}

TEST(punctuation)
{
    if (!have())
        return;
    EXPECT("Hello, world!!! (ok)... --- $$$ !?", 0,
           15496, 11, 995, 10185, 357, 482, 26513, 11420, 720, 13702, 5145, 30);
}

TEST(letters_and_marks_beyond_ascii)
{
    if (!have_unicode())
        return;
    /* café, naïve, "cafe" + combining acute (a mark: its own piece),
     * Russian, Chinese, Arabic */
    EXPECT("caf\xc3\xa9 na\xc3\xafve cafe\xcc\x81 \xd0\x92\xd1\x81\xd0\xb5\xd0\xbc "
           "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96"
           "\xe7\x95\x8c \xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a", 0,
           66, 1878, 2634, 41492, 26725, 136, 223, 12466, 240, 21727, 16843, 43108, 12466, 123,
           21169, 18849, 38857, 16843, 20375, 220, 19526, 254, 25001, 121, 10310, 244, 45911,
           234, 17550, 117, 26897, 39848, 22654);
}

TEST(emoji)
{
    if (!have())
        return;
    EXPECT("\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd hi \xf0\x9f\x9a\x80\xf0\x9f\x9a\x80!",
           0, 47249, 222, 41840, 235, 8582, 237, 121, 23105, 12520, 248, 222, 8582, 248, 222, 0);
}

TEST(long_word_and_long_number)
{
    if (!have())
        return;
    EXPECT("Pneumonoultramicroscopicsilicovolcanoconiosis", 0,
           47, 25668, 261, 25955, 859, 2500, 1416, 404, 873, 41896, 709, 349, 5171, 36221, 42960);
    /* 300 digits: one piece, longer than the plain scan takes */
    char digits[301];
    for (int i = 0; i < 300; i++)
        digits[i] = (char)('0' + i % 10);
    digits[300] = 0;
    int32_t want[150];
    static const int32_t period[] = { 486, 1954, 2231, 3134, 4531 };
    for (int i = 0; i < 150; i++)
        want[i] = period[i % 5];
    expect(digits, 0, want, 150);
}

TEST(endoftext_ordinary_and_special)
{
    if (!have())
        return;
    EXPECT("a<|endoftext|>b", 0, 64, 27, 91, 437, 1659, 5239, 91, 29, 65);
    EXPECT("a<|endoftext|>b", WEFT_BPE_SPECIAL, 64, 50256, 65);
    /* the text on either side is encoded alone: its trailing spaces stay */
    EXPECT("x  <|endoftext|>  y", WEFT_BPE_SPECIAL, 87, 220, 220, 50256, 220, 331);
    EXPECT("<|endoftext|><|endoftext|>", WEFT_BPE_SPECIAL, 50256, 50256);
}

/* Encodes s[0..n) and returns the count (t has room for n). */
static size_t enc(const char *s, size_t n, int32_t *t)
{
    size_t count = 0;
    CHECK(weft_bpe_encode(bpe, s, n, 0, t, n, &count) == 0);
    return count;
}

TEST(invalid_utf8_and_empty)
{
    if (!have())
        return;
    int32_t t[64], u[64];
    size_t count = 99;
    CHECK(weft_bpe_encode(bpe, "", 0, 0, t, 0, &count) == 0 && count == 0);
    CHECK(weft_bpe_encode(bpe, NULL, 0, WEFT_BPE_SPECIAL, NULL, 0, &count) == 0 && count == 0);
    /* each invalid byte is a punctuation character of its own class run */
    const char *bad[] = { "a\377b", "\xc3(", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82",
                          "ok \xc0\xaf!", "\x80\x80\x80 x" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = strlen(bad[i]), m = enc(bad[i], n, t), len = 0;
        char back[64];
        CHECK(weft_bpe_decode(bpe, t, m, back, sizeof back, &len) == 0);
        CHECKF(len == n && memcmp(back, bad[i], n) == 0, "case %zu does not decode back", i);
    }
    /* "a\377b": three pieces, the same as each alone */
    size_t m = enc("a\377b", 3, t);
    size_t k = enc("a", 1, u);
    k += enc("\xff", 1, u + k);
    k += enc("b", 1, u + k);
    CHECK(m == k && memcmp(t, u, m * sizeof *t) == 0);
}

TEST(bad_arguments)
{
    if (!have())
        return;
    int32_t t[8];
    size_t count, len;
    char s[4];
    CHECK(weft_bpe_encode(bpe, "hello", 5, 0, t, 4, &count) == WEFT_EINVAL);
    CHECK(weft_bpe_encode(bpe, "hello", 5, 2, t, 8, &count) == WEFT_EINVAL);
    CHECK(weft_bpe_encode(NULL, "hello", 5, 0, t, 8, &count) == WEFT_EINVAL);
    int32_t bad[] = { 50257 }, neg[] = { -1 }, two[] = { 15496, 995 };
    CHECK(weft_bpe_decode(bpe, bad, 1, s, sizeof s, &len) == WEFT_EINVAL);
    CHECK(weft_bpe_decode(bpe, neg, 1, s, sizeof s, &len) == WEFT_EINVAL);
    /* snprintf's rule: the full length, cap bytes written */
    CHECK(weft_bpe_decode(bpe, two, 2, NULL, 0, &len) == 0 && len == 11);
    CHECK(weft_bpe_decode(bpe, two, 2, s, sizeof s, &len) == 0 && len == 11 &&
          memcmp(s, "Hell", 4) == 0);
}

/* The pieces of text, joined by '|'. */
static void pieces(const char *text, char *out, size_t cap)
{
    size_t n = strlen(text), o = 0;
    for (size_t i = 0; i < n;) {
        size_t e = bpe_split_next(bpe, (const unsigned char *)text, n, i);
        if (o && o + 1 < cap)
            out[o++] = '|';
        for (; i < e && o + 1 < cap; i++)
            out[o++] = text[i];
    }
    out[o] = 0;
}

TEST(pre_tokenizer_pieces)
{
    if (!have())
        return;
    static const char *cases[][2] = {
        { "Hello world", "Hello| world" },
        { "a  b", "a| | b" },
        { "a \n\nb", "a| \n|\n|b" },
        { "it's they'RE 'll", "it|'s| they|'|RE| '|ll" },
        { "x  ", "x|  " },
        { "'Hello'", "'|Hello|'" },
        { " 123abc", " 123|abc" },
        { "$$$ !", "$$$| !" },
        { "  \t x", "  \t| x" },
        { "'", "'" },
        { " ", " " },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char got[128];
        pieces(cases[i][0], got, sizeof got);
        CHECKF(strcmp(got, cases[i][1]) == 0, "\"%s\" -> \"%s\", want \"%s\"", cases[i][0], got,
               cases[i][1]);
    }
}

TEST(heap_merge_equals_scan)
{
    if (!have())
        return;
    /* pieces longer than the scan's limit, from small alphabets so that
     * many merges compete */
    const char *alpha[] = { "ab", "abc ", "0123456789", "-=", "eathrso", "\xe4\xbd\xa0\xe5\xa5\xbd" };
    uint64_t x = 88172645463325252ull;
    size_t rounds = 60 / (size_t)(getenv("TEST_SCALE") ? atoi(getenv("TEST_SCALE")) : 1);
    for (size_t r = 0; r < rounds + 1; r++) {
        size_t n = 65 + r * 37 % 2000;
        const char *a = alpha[r % 6];
        size_t na = strlen(a);
        unsigned char *s = malloc(n);
        int32_t *t = malloc(n * sizeof *t), *u = malloc(n * sizeof *u);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[i] = (unsigned char)a[x % na];
        }
        size_t m = 0;
        CHECK(bpe_merge(bpe, s, n, t, &m) == 0);
        size_t k = bpe_merge_scan(bpe, s, n, u);
        CHECKF(m == k && memcmp(t, u, m * sizeof *t) == 0, "round %zu (%zu bytes)", r, n);
        free(s);
        free(t);
        free(u);
    }
}

TEST(missing_and_damaged_tables)
{
    char dir[] = "/tmp/weft-test-bpe-XXXXXX", p[600], why[4200];
    CHECK(mkdtemp(dir) != NULL);
    weft_bpe *b = (weft_bpe *)1;
    CHECK(weft_bpe_open(&b, dir, why, sizeof why) == WEFT_ECONFIG && b == NULL);
    CHECKF(strstr(why, "encoder.json") && strstr(why, "tokenizer-data") && strstr(why, dir),
           "%s", why);
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"!\": 0, \"\\\"\": 1", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    f = fopen(p, "w");
    fputs("#version: 0.2\n", f);
    fclose(f);
    CHECK(weft_bpe_open(&b, dir, why, sizeof why) == WEFT_EIO && b == NULL);
    CHECKF(strstr(why, "encoder.json") != NULL, "%s", why);
    CHECK(weft_bpe_open(NULL, dir, NULL, 0) == WEFT_EINVAL);
    unlink(p);
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    unlink(p);
    rmdir(dir);
}
