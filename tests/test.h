/* The test harness, in the manner of libuv's test runner.
 *
 *   TEST(name) { ... CHECK(x == 1); ... }   defines and registers a case
 *   TEST_INIT { ... }                       runs once before the first case
 *   TEST_TIMEOUT(600)                       tells tests/run.sh this program may
 *                                           run 600 s (default 300)
 *
 * Every test program gets main() from here:
 *
 *   build/tests/test_coll                    every case, in file order
 *   build/tests/test_coll allreduce_ring     the named cases (or shell
 *   build/tests/test_coll 'allreduce_*'      patterns), in file order
 *   build/tests/test_coll --list             the names, one a line
 *
 * CHECK records a failure and goes on. Each case prints "ok   NAME" or
 * "FAIL NAME" with its counts; the program ends with
 * "summary: P passed, F failed" for tests/run.sh to add up and exits
 * non-zero on any failure. A case runs in the test process itself: one that
 * needs ranks forks them (mp.h), and children's counts are folded back. */
#ifndef WEFT_TEST_H
#define WEFT_TEST_H
#include "fixtures.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-program state of the harness: a test program is one process (and its
 * forked ranks), so these are its own. */
static int test_passed_, test_failed_;

#define CHECK(cond) do { \
        if (cond) test_passed_++; \
        else { test_failed_++; \
               fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

#define CHECKF(cond, ...) do { \
        if (cond) test_passed_++; \
        else { test_failed_++; \
               fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
               fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
    } while (0)

typedef struct {
    const char *name;
    void (*fn)(void);
    int line, seq; /* where it is defined; the order it registered in */
} test_case;

#define TEST_MAX_CASES 256
static test_case test_cases_[TEST_MAX_CASES];
static int test_ncases_;
static void (*test_init_fn_)(void);

static void test_register_(const char *name, void (*fn)(void), int line)
{
    if (test_ncases_ == TEST_MAX_CASES) {
        fprintf(stderr, "test.h: more than %d cases; %s is left out\n", TEST_MAX_CASES, name);
        test_failed_++;
        return;
    }
    test_cases_[test_ncases_] = (test_case){ name, fn, line, test_ncases_ };
    test_ncases_++;
}

/* A constructor registers each case before main runs: no list to keep. */
#define TEST(name) \
    static void test_case_##name(void); \
    __attribute__((constructor)) static void test_reg_##name(void) \
    { test_register_(#name, test_case_##name, __LINE__); } \
    static void test_case_##name(void)

#define TEST_INIT \
    static void test_init_(void); \
    __attribute__((constructor)) static void test_init_reg_(void) { test_init_fn_ = test_init_; } \
    static void test_init_(void)

/* Read from the source by tests/run.sh; the enum only keeps it C. */
#define TEST_TIMEOUT(seconds) enum { test_timeout_s_ = (seconds) }

/* Whether case `name` is among the command line's names or patterns. */
static int test_selected_(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (!fnmatch(argv[i], name, 0))
            return 1;
    return 0;
}

static int test_by_line_(const void *a, const void *b)
{
    const test_case *x = a, *y = b;
    return x->line != y->line ? x->line - y->line : x->seq - y->seq;
}

int main(int argc, char **argv)
{
    /* constructors may run in either order; cases run as the file reads */
    qsort(test_cases_, (size_t)test_ncases_, sizeof test_cases_[0], test_by_line_);
    if (argc > 1 && (!strcmp(argv[1], "--list") || !strcmp(argv[1], "-l"))) {
        for (int i = 0; i < test_ncases_; i++)
            printf("%s\n", test_cases_[i].name);
        return 0;
    }
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: %s [--list] [CASE|PATTERN ...]\n", argv[0]);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int any = 0;
        for (int k = 0; k < test_ncases_ && !any; k++)
            any = !fnmatch(argv[i], test_cases_[k].name, 0);
        if (!any) {
            fprintf(stderr, "%s: no case matches %s (--list names them)\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (test_init_fn_)
        test_init_fn_();
    char failed[1024] = "";
    for (int i = 0; i < test_ncases_; i++) {
        if (!test_selected_(test_cases_[i].name, argc, argv))
            continue;
        int p0 = test_passed_, f0 = test_failed_;
        printf("---- %s\n", test_cases_[i].name);
        fflush(stdout);
        test_cases_[i].fn();
        int p = test_passed_ - p0, f = test_failed_ - f0;
        if (f)
            printf("FAIL %s (%d passed, %d failed)\n", test_cases_[i].name, p, f);
        else
            printf("ok   %s (%d checks)\n", test_cases_[i].name, p);
        fflush(stdout);
        if (f && strlen(failed) + strlen(test_cases_[i].name) + 2 < sizeof failed)
            strcat(strcat(failed, " "), test_cases_[i].name);
    }
    if (*failed)
        printf("failed cases:%s\n", failed);
    printf("summary: %d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ ? 1 : 0;
}

#endif
