/* Minimal test harness: CHECK records a failure and goes on; each test
 * binary ends with TEST_DONE(), which prints "summary: P passed, F failed"
 * for tests/run.sh to add up and exits non-zero on any failure. */
#ifndef WEFT_TEST_H
#define WEFT_TEST_H
#include <stdio.h>
#include <stdlib.h>

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

#define TEST_DONE() do { \
        printf("summary: %d passed, %d failed\n", test_passed_, test_failed_); \
        return test_failed_ ? 1 : 0; \
    } while (0)

#endif
