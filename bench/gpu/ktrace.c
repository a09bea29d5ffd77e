/* ktrace: where a CUDA program's GPU time goes, kernel by kernel, for any
 * program (atoll-train, llm.c, PyTorch) without changing it. The CUDA driver
 * loads it at the first CUDA call:
 *
 *   CUDA_INJECTION64_PATH=ktrace.so KTRACE_OUT=profile.md program ...
 *
 * It records every kernel, memcpy and memset with CUPTI's activity API (device
 * timestamps, kernels may overlap) and at exit writes a table to KTRACE_OUT
 * (stderr when unset): per kernel name (demangled, templates cut), the calls,
 * total and mean time and the share of all recorded GPU time; then the time
 * the GPU ran nothing at all between the first and the last record (the
 * host's gaps: syncs, launches, host work between steps), with the places it
 * happened most, named by the record before and the record after each gap.
 * KTRACE_SKIP=N leaves out the first N seconds of records (start-up,
 * autotuning); KTRACE_AFTER=NAME leaves out every record that starts before the
 * first call of the kernel NAME ends (NAME as the table prints it, e.g. the
 * optimizer's kernel: the tables then cover whole steps after the first, without
 * the weights' upload, lazy module loading and plan building). */
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

typedef struct { /* every record, for the idle gaps */
    uint64_t start, end;
    int row;
} kt_rec;
static kt_rec *recs;
static size_t nrecs, caprecs;

typedef struct { /* a place the GPU went idle: between these two rows' records */
    int before, after;
    uint64_t n, ns;
} kt_site;

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
    if (nrecs == caprecs) {
        size_t cap = caprecs ? 2 * caprecs : 65536;
        kt_rec *r = realloc(recs, cap * sizeof *r);
        if (!r) return;
        recs = r, caprecs = cap;
    }
    recs[nrecs++] = (kt_rec){ start, end, i };
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

static int by_time(const void *a, const void *b) /* row indices, most time first */
{
    const kt_row *x = &rows[*(const int *)a], *y = &rows[*(const int *)b];
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

static int by_start(const void *a, const void *b)
{
    const kt_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* GPU idle time: the record list in start order, a gap wherever a record
 * starts after every earlier one has ended; sites are (the record that ended
 * last, the one that starts), the biggest 10 by total printed. */
static void idle_gaps(FILE *f)
{
    if (nrecs < 2) return;
    qsort(recs, nrecs, sizeof recs[0], by_start);
    enum { SITES = 512 };
    static kt_site site[SITES];
    int nsites = 0;
    uint64_t busy = recs[0].end, idle = 0, gaps = 0;
    int last = recs[0].row;
    for (size_t k = 1; k < nrecs; k++) {
        if (recs[k].start > busy) {
            uint64_t g = recs[k].start - busy;
            idle += g, gaps++;
            int j = 0;
            while (j < nsites && !(site[j].before == last && site[j].after == recs[k].row)) j++;
            if (j == nsites && nsites < SITES) site[nsites++] = (kt_site){ last, recs[k].row, 0, 0 };
            if (j < nsites) site[j].n++, site[j].ns += g;
        }
        if (recs[k].end > busy) busy = recs[k].end, last = recs[k].row;
    }
    uint64_t span = busy - recs[0].start;
    fprintf(f, "\nGPU idle (nothing running) between the first and the last record: %.3f ms of %.3f ms (%.1f%%), "
               "%llu gaps\n\n| idle after | and before | gaps | total ms | mean us |\n|---|---|---:|---:|---:|\n",
            idle / 1e6, span / 1e6, 100.0 * idle / (span ? span : 1), (unsigned long long)gaps);
    for (int shown = 0; shown < 10; shown++) {
        int best = -1;
        for (int j = 0; j < nsites; j++)
            if (site[j].n && (best < 0 || site[j].ns > site[best].ns)) best = j;
        if (best < 0) break;
        fprintf(f, "| %s | %s | %llu | %.3f | %.1f |\n", rows[site[best].before].name, rows[site[best].after].name,
                (unsigned long long)site[best].n, site[best].ns / 1e6, site[best].ns / 1e3 / (double)site[best].n);
        site[best].n = 0;
    }
}

/* KTRACE_AFTER: keep the records that start after the first call of `name`
 * ends, and count the rows from those alone; false when it never ran. */
static int keep_after(const char *name)
{
    qsort(recs, nrecs, sizeof recs[0], by_start);
    size_t k = 0;
    while (k < nrecs && strcmp(rows[recs[k].row].name, name)) k++;
    if (k == nrecs) return 0;
    uint64_t cut = recs[k].end;
    size_t n = 0;
    for (int i = 0; i < nrows; i++) rows[i].calls = rows[i].ns = 0;
    for (k = 0; k < nrecs; k++)
        if (recs[k].start >= cut) {
            recs[n++] = recs[k];
            rows[recs[k].row].calls++;
            rows[recs[k].row].ns += recs[k].end - recs[k].start;
        }
    nrecs = n;
    return 1;
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("KTRACE_OUT"), *after = getenv("KTRACE_AFTER");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f) f = stderr;
    if (after && *after) {
        if (keep_after(after))
            fprintf(f, "Records after the first call of %s ended.\n\n", after);
        else
            fprintf(f, "ktrace: no kernel named %s ran; every record is counted.\n\n", after);
    }
    static int order[KT_MAX];
    for (int i = 0; i < nrows; i++) order[i] = i;
    qsort(order, (size_t)nrows, sizeof order[0], by_time);
    uint64_t total = 0, calls = 0;
    for (int i = 0; i < nrows; i++) total += rows[i].ns, calls += rows[i].calls;
    fprintf(f, "| kernel | calls | total ms | mean us | share |\n|---|---:|---:|---:|---:|\n");
    for (int o = 0; o < nrows; o++) {
        const kt_row *r = &rows[order[o]];
        fprintf(f, "| %s | %llu | %.3f | %.1f | %.1f%% |\n", r->name, (unsigned long long)r->calls, r->ns / 1e6,
                r->ns / 1e3 / (double)r->calls, 100.0 * r->ns / (total ? total : 1));
    }
    fprintf(f, "| all | %llu | %.3f | | 100%% |\n", (unsigned long long)calls, total / 1e6);
    idle_gaps(f);
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
