/* check: the tiny assertion helpers every C unit test uses.
 * CHECK(cond, fmt...) reports file:line and the message and counts a failure;
 * tests end with `return check_summary(argv[0]);`, which prints
 * "N passed, M failed" and returns non-zero on any failure. */
#ifndef ATOLL_TEST_CHECK_H
#define ATOLL_TEST_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_passed_, check_failed_;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) {                                                          \
            check_passed_++;                                                 \
        } else {                                                             \
            check_failed_++;                                                 \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

/* |a-b| <= tol * max(|a|,|b|, 1e-30): relative closeness. */
#define CHECK_CLOSE(a, b, tol)                                               \
    do {                                                                     \
        double a_ = (a), b_ = (b);                                           \
        double s_ = fmax(fabs(a_), fabs(b_));                                \
        CHECK(fabs(a_ - b_) <= (tol) * (s_ > 1e-30 ? s_ : 1e-30),            \
              "%s = %.10g, %s = %.10g (tol %g)", #a, a_, #b, b_, (double)(tol)); \
    } while (0)

static inline int check_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif
