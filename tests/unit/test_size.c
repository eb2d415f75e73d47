/* The one size grammar (core/size.h) that every size option and WEFT_*
 * size variable reads: byte counts, K/M/G/T with or without iB (powers of
 * 1024), fractions with a unit, hex; what it refuses and what the refusal
 * says; and the tools and variables that take sizes reading them through
 * it (weft-train --mem-limit 64M was refused as a bad value). */
#include "core/size.h"
#include "test.h"
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static uint64_t parsed(const char *s)
{
    uint64_t v = 12345;
    char err[200] = "";
    int rc = size_parse(s, 0, UINT64_MAX, &v, err, sizeof err);
    CHECKF(rc == 0, "'%s' refused: %s", s, err);
    return v;
}

/* s refused, its message holding want */
static void refused(const char *s, uint64_t lo, uint64_t hi, const char *want)
{
    uint64_t v = 777;
    char err[200] = "";
    int rc = size_parse(s, lo, hi, &v, err, sizeof err);
    CHECKF(rc == WEFT_EINVAL && v == 777, "'%s' accepted as %llu", s, (unsigned long long)v);
    CHECKF(strstr(err, want), "'%s': \"%s\" lacks \"%s\"", s, err, want);
}

TEST(units)
{
    CHECK(parsed("0") == 0);
    CHECK(parsed("65536") == 65536);
    CHECK(parsed("512B") == 512);
    CHECK(parsed("64K") == 64 << 10 && parsed("64k") == 64 << 10);
    CHECK(parsed("64KB") == 64 << 10 && parsed("64KiB") == 64 << 10 && parsed("64kib") == 64 << 10);
    CHECK(parsed("2M") == 2 << 20 && parsed("2MiB") == 2 << 20 && parsed("2MB") == 2 << 20);
    CHECK(parsed("64M") == 64ull << 20);
    CHECK(parsed("3G") == 3ull << 30 && parsed("3GiB") == 3ull << 30);
    CHECK(parsed("1T") == 1ull << 40 && parsed("2TiB") == 2ull << 40);
    CHECK(parsed("0x20000") == 0x20000); /* WEFT_PS_SNDBUF=0x20000 kept working */
    CHECK(parsed("16777215T") == 16777215ull << 40);
    CHECK(parsed("18446744073709551615") == UINT64_MAX);
}

TEST(fractions)
{
    /* a fraction needs a unit and is rounded down to a whole byte */
    CHECK(parsed("1.5G") == 3ull << 29);
    CHECK(parsed("1.5K") == 1536);
    CHECK(parsed("0.5M") == 512 << 10);
    CHECK(parsed("0.1K") == 102);
    CHECK(parsed("2.25MiB") == 9ull << 18);
    refused("1.5", 0, UINT64_MAX, "bad size '1.5'");
    refused("1.", 0, UINT64_MAX, "bad size");
}

TEST(refusals)
{
    const char *bad[] = { "", "64Q", "abc", "-1", " 5", "5 ", "1e3", "inf", "nan", "64Mi",
                          "64MiBx", "K", "0x", "64 M", "1,5G", "+5", "5KK" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        refused(bad[i], 0, UINT64_MAX, "bad size");
    /* the message names the value and shows a form that works */
    refused("64Q", 0, UINT64_MAX, "bad size '64Q' (want bytes or a number with K, M, G or T");
    refused("64Q", 0, UINT64_MAX, "e.g. 64M");
    /* past 2^64 in any way is out of range, never wrapped */
    refused("18446744073709551616", 0, UINT64_MAX, "out of range");
    refused("16777216T", 0, UINT64_MAX, "out of range");
    refused("0x10000000000000000", 0, UINT64_MAX, "out of range");
    /* a range names both ends, with units and in bytes */
    refused("1K", 64 << 10, 1 << 30, "want 64K to 1G, 65536 to 1073741824 bytes");
    refused("2G", 64 << 10, 1 << 30, "out of range");
    uint64_t v = 0;
    CHECK(size_parse("1G", 64 << 10, 1 << 30, &v, NULL, 0) == 0 && v == 1 << 30);
    CHECK(size_parse("junk", 0, 10, &v, NULL, 0) == WEFT_EINVAL); /* err may be NULL */
    CHECK(size_parse(NULL, 0, 10, &v, NULL, 0) == WEFT_EINVAL);
}

TEST(text)
{
    char b[32];
    CHECK(!strcmp(size_text(0, b, sizeof b), "0"));
    CHECK(!strcmp(size_text(1000, b, sizeof b), "1000"));
    CHECK(!strcmp(size_text(1536, b, sizeof b), "1536"));
    CHECK(!strcmp(size_text(65536, b, sizeof b), "64K"));
    CHECK(!strcmp(size_text(3ull << 30, b, sizeof b), "3G"));
    CHECK(!strcmp(size_text(1ull << 50, b, sizeof b), "1024T"));
    /* what it prints reads back */
    uint64_t vals[] = { 1, 1023, 4096, 5ull << 20, (1ull << 40) + 1024 };
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        CHECK(parsed(size_text(vals[i], b, sizeof b)) == vals[i]);
}

/* ---- the tools and variables that take sizes ------------------------------ */

static char build[512];

TEST_INIT
{
    const char *b = getenv("BUILD");
    snprintf(build, sizeof build, "%s", b && *b ? b : "build");
}

/* Runs cmd (under sh, both streams to out); its exit status. */
static int sh(const char *cmd, char *out, size_t cap)
{
    char line[4096];
    snprintf(line, sizeof line, "{ %s; } </dev/null 2>&1", cmd);
    FILE *p = popen(line, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void tool_ok(const char *args)
{
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "timeout 60 %s/%s", build, args);
    int rc = sh(cmd, out, sizeof out);
    CHECKF(rc == 0, "%s: exit %d: %.400s", args, rc, out);
}

static void tool_refuses(const char *args, const char *want1, const char *want2)
{
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "timeout 60 %s/%s", build, args);
    int rc = sh(cmd, out, sizeof out);
    CHECKF(rc != 0 && rc < 124, "%s: exit %d", args, rc);
    CHECKF(strstr(out, want1), "%s: \"%.300s\" lacks \"%s\"", args, out, want1);
    if (want2)
        CHECKF(strstr(out, want2), "%s: \"%.300s\" lacks \"%s\"", args, out, want2);
}

#define TINY "--model mlp:784-16-10 --data builtin --train-size 64 --batch 8 --steps 1 " \
             "--no-eval --quiet"

TEST(tools)
{
    tool_ok("weft-train " TINY " --mem-limit 64M");
    tool_ok("weft-train " TINY " --mem-limit 64MiB");
    tool_ok("weft-train " TINY " --mem-limit 1.5G");
    tool_ok("weft-train " TINY " --mem-limit 100000000");
    tool_refuses("weft-train " TINY " --mem-limit 64Q", "--mem-limit: bad size '64Q'",
                 "e.g. 64M");
    /* MiB-valued options: a bare number is MiB, as always; a unit is a size */
    tool_ok("weft-train " TINY " --bucket-mb 0.5");
    tool_ok("weft-train " TINY " --bucket-mb 512K");
    tool_refuses("weft-train " TINY " --bucket-mb 5X", "--bucket-mb", "e.g. 64M");
    tool_ok("weft-bench allreduce -b 1KiB -e 2KiB -n 1 -w 0");
    tool_ok("weft-bench allreduce -l 1K,0.5KiB -n 1 -w 0");
    tool_refuses("weft-bench allreduce -b 1X", "-b 1X: bad size '1X'", "e.g. 64M");
    tool_ok("weft-sim allreduce --ranks 4 --size 1MiB --size 2.5M");
    tool_refuses("weft-sim allreduce --size 2Q", "--size: bad size '2Q'", NULL);
    tool_ok("weft-sim pipeline --p 2 --m 2 --model mlp:784-64-64-10 --mem-cap 2GiB");
    tool_refuses("weft-sim pipeline --p 2 --m 2 --model mlp:784-64-10 --mem-cap 2Q",
                 "--mem-cap: bad size", NULL);
    tool_ok("weft-sim plan --model gpt:vocab=64,ctx=16,layers=2,heads=2,dim=32 --batch 8 "
            "--ranks 2 --mem 1GiB");
    tool_refuses("weft-psbench -s 4Q", "-s 4Q: bad size '4Q'", NULL);
    /* the size is read; the refusal is for the missing servers */
    char out[4096];
    snprintf(out, sizeof out, "timeout 60 %s/weft-psbench -s 4MiB", build);
    sh(out, out, sizeof out);
    CHECKF(!strstr(out, "bad size"), "psbench -s 4MiB: %.300s", out);
    /* --help says what a size is */
    tool_ok("weft-train --help | grep -q 'powers of 1024'");
    tool_ok("weft-bench 2>&1 | grep -q 'powers of 1024'");
}

TEST(variables)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "WEFT_SHM_RING=4MiB WEFT_PS_SNDBUF=1.5M timeout 60 "
             "%s/weft-bench allreduce -b 8 -e 8 -n 1 -w 0", build);
    int rc = sh(cmd, out, sizeof out);
    CHECKF(rc == 0, "WEFT_SHM_RING=4MiB: exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "WEFT_SHM_RING=4Q timeout 60 %s/weft-bench allreduce -b 8 -e 8",
             build);
    rc = sh(cmd, out, sizeof out);
    CHECKF(rc != 0 && strstr(out, "WEFT_SHM_RING=4Q: bad size '4Q'") && strstr(out, "e.g. 64M"),
           "WEFT_SHM_RING=4Q: exit %d: %.300s", rc, out);
}
