/* ktrace: where a CUDA program's GPU time goes, kernel by kernel, for any
 * program (atoll-train, llm.c, PyTorch) without changing it. The CUDA driver
 * loads it at the first CUDA call:
 *
 *   CUDA_INJECTION64_PATH=ktrace.so KTRACE_OUT=profile.md program ...
 *
 * It records every kernel, memcpy and memset with CUPTI's activity API (device
 * timestamps, kernels may overlap) and at exit writes a table to KTRACE_OUT
 * (stderr when unset): per kernel name (demangled, templates cut), the calls,
 * total and mean time and the share of all recorded GPU time. KTRACE_SKIP=N
 * leaves out the first N seconds of records (start-up, autotuning). */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KT_BUF (8u << 20)
#define KT_MAX 4096

char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

typedef struct {
    char name[160];
    uint64_t calls, ns;
} kt_row;

static kt_row rows[KT_MAX];
static int nrows;
static uint64_t t_first, skip_ns;

static void ktcheck(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS) return;
    const char *msg = "?";
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "ktrace: %s: %s\n", what, msg);
}

/* "void fa_fwd_k<64>(bf16*, ...)" -> "fa_fwd_k<64>"; cuBLAS names keep their head */
static void short_name(const char *mangled, char *out, size_t n)
{
    int status = 0;
    char *d = __cxa_demangle(mangled, NULL, NULL, &status);
    const char *s = status == 0 && d ? d : mangled;
    if (!strncmp(s, "void ", 5)) s += 5;
    size_t k = 0;
    int depth = 0;
    for (; s[k] && k + 1 < n; k++) {
        if (s[k] == '<') depth++;
        if (s[k] == '>') depth--;
        if (s[k] == '(' && depth == 0) break;
    }
    snprintf(out, n, "%.*s", (int)k, s);
    free(d);
}

static void add(const char *name, uint64_t start, uint64_t end)
{
    if (!t_first || start < t_first) t_first = start;
    if (start < t_first + skip_ns) return;
    int i;
    for (i = 0; i < nrows; i++)
        if (!strcmp(rows[i].name, name)) break;
    if (i == nrows) {
        if (nrows == KT_MAX) return;
        snprintf(rows[nrows++].name, sizeof rows[0].name, "%s", name);
    }
    rows[i].calls++;
    rows[i].ns += end - start;
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, KT_BUF);
    *size = KT_BUF;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    char nm[160];
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
            short_name(k->name, nm, sizeof nm);
            add(nm, k->start, k->end);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)rec;
            snprintf(nm, sizeof nm, "[memcpy kind %d]", (int)m->copyKind);
            add(nm, m->start, m->end);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)rec;
            add("[memset]", m->start, m->end);
        }
    }
    free(buf);
}

static int by_time(const void *a, const void *b)
{
    const kt_row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("KTRACE_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f) f = stderr;
    qsort(rows, (size_t)nrows, sizeof rows[0], by_time);
    uint64_t total = 0, calls = 0;
    for (int i = 0; i < nrows; i++) total += rows[i].ns, calls += rows[i].calls;
    fprintf(f, "| kernel | calls | total ms | mean us | share |\n|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < nrows; i++)
        fprintf(f, "| %s | %llu | %.3f | %.1f | %.1f%% |\n", rows[i].name, (unsigned long long)rows[i].calls,
                rows[i].ns / 1e6, rows[i].ns / 1e3 / (double)rows[i].calls, 100.0 * rows[i].ns / (total ? total : 1));
    fprintf(f, "| all | %llu | %.3f | | 100%% |\n", (unsigned long long)calls, total / 1e6);
    if (f != stderr) fclose(f);
}

int InitializeInjection(void)
{
    const char *skip = getenv("KTRACE_SKIP");
    skip_ns = skip ? (uint64_t)(atof(skip) * 1e9) : 0;
    ktcheck(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
    ktcheck(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
    ktcheck(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
    ktcheck(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
    atexit(report);
    return 1;
}
