/* comm_allreduce: host-transport all-reduce bus bandwidth on loopback, against
 * a memcpy of the same bytes.
 *
 *   comm_allreduce [--out FILE.md] [--max-mib N] [--ranks 2,4]
 *
 * Run without RANK, it launches itself as 2 and then 4 ranks (the local
 * launcher). Each rank all-reduces fp32 buffers of 1 KiB .. 64 MiB (powers of
 * two); time per size is the median over repetitions after a warm-up, taken as
 * the slowest rank's (max-reduced) time. Bus bandwidth follows nccl-tests:
 * busbw = bytes / t * 2(P-1)/P, the bytes each rank's link actually carries.
 * The memcpy column copies the same bytes once in one process (best of 5).
 */
#include "comm.h"
#include "launcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int rank_main(const char *tsv, size_t max_bytes)
{
    comm_world *w;
    char err[512];
    if (comm_world_init_env(&w, COMM_BACKEND_HOST, 0, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    comm *c = comm_world_comm(w);
    int P = comm_size(c), R = comm_rank(c);
    FILE *f = R == 0 ? fopen(tsv, "w") : NULL;
    float *buf = malloc(max_bytes);
    for (size_t i = 0; i < max_bytes / 4; i++) buf[i] = 1.0f;
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 2) {
        size_t n = bytes / sizeof(float);
        int reps = bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 4;
        comm_allreduce(c, buf, n, COMM_SUM); /* warm-up: buffers, socket windows */
        /* One all-reduce takes as long as its slowest rank: gather every rank's time. */
        double *all = malloc(sizeof(double) * (size_t)reps);
        for (int k = 0; k < reps; k++) {
            comm_barrier(c);
            double t0 = now();
            comm_allreduce(c, buf, n, COMM_SUM);
            float dt = (float)(now() - t0), every[64];
            comm_allgather(c, &dt, every, 1);
            double mx = 0;
            for (int q = 0; q < P; q++) mx = every[q] > mx ? every[q] : mx;
            all[k] = mx;
        }
        qsort(all, (size_t)reps, sizeof *all, cmp_double);
        if (f) fprintf(f, "%zu\t%.9f\n", bytes, all[reps / 2]);
        free(all);
        for (size_t i = 0; i < n; i++) buf[i] = 1.0f; /* keep values small */
    }
    if (f) fclose(f);
    free(buf);
    comm_world_free(w);
    return 0;
}

static volatile unsigned char sink;

static double memcpy_time(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    int reps = bytes <= (1u << 20) ? 200 : 5;
    for (int k = 0; k < 5; k++) {
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            a[(size_t)r * 4099 % bytes]++; /* a new source each time, read back below */
            memcpy(b, a, bytes);
            __asm__ volatile("" : : "r"(b) : "memory");
            sink = b[(size_t)r * 4099 % bytes];
        }
        double dt = (now() - t0) / reps;
        best = dt < best ? dt : best;
    }
    free(a);
    free(b);
    return best;
}

static void shell_line(FILE *out, const char *cmd)
{
    FILE *p = popen(cmd, "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) fputs(line, out);
    if (p) pclose(p);
}

int main(int argc, char **argv)
{
    const char *out = "bench/results/comm_allreduce.md";
    int max_mib = 64;
    int ranks[8] = {2, 4}, nr = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--max-mib")) max_mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranks")) {
            nr = 0;
            for (char *t = strtok(argv[i + 1], ","); t && nr < 8; t = strtok(NULL, ",")) ranks[nr++] = atoi(t);
        } else if (!strcmp(argv[i], "--rank-tsv")) {
            /* internal: this process is a rank */
        } else {
            fprintf(stderr, "comm_allreduce: unknown flag %s (use --out FILE, --max-mib N, --ranks 2,4)\n", argv[i]);
            return 2;
        }
    }
    if (max_mib < 1 || max_mib > 1024) {
        fprintf(stderr, "comm_allreduce: --max-mib must be 1..1024 (got %d)\n", max_mib);
        return 2;
    }
    size_t max_bytes = (size_t)max_mib << 20;
    if (getenv("RANK")) return rank_main(argv[argc - 1], max_bytes);

    FILE *o = fopen(out, "w");
    if (!o) {
        fprintf(stderr, "comm_allreduce: cannot write %s\n", out);
        return 1;
    }
    time_t now_t = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now_t));
    struct utsname u;
    uname(&u);
    fprintf(o, "# Host-transport all-reduce on loopback vs memcpy\n\n");
    fprintf(o, "- date: %s\n- machine: `%s %s %s %s %s`\n- cpu: ", date, u.sysname, u.nodename, u.release,
            u.version, u.machine);
    fflush(o);
    shell_line(o, "lscpu | grep 'Model name' | sed 's/  */ /g'");
    fprintf(o, "- cores: %ld online\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(o, "- command: `");
    for (int i = 0; i < argc; i++) fprintf(o, "%s%s", i ? " " : "", argv[i]);
    fprintf(o, "`\n- method: fp32 ring all-reduce (reduce-scatter + all-gather, 1 MiB chunks) between "
               "processes started by the local launcher; median of 4-50 repetitions of the slowest rank's time. "
               "busbw = bytes/t x 2(P-1)/P (nccl-tests convention). memcpy: one copy of the same bytes in one "
               "process, best of 5.\n\n");
    for (int ri = 0; ri < nr; ri++) {
        char tsv[] = "/tmp/comm_allreduce_XXXXXX";
        int fd = mkstemp(tsv);
        if (fd >= 0) close(fd);
        char mib[16];
        snprintf(mib, sizeof mib, "%d", max_mib);
        char *args[] = {argv[0], "--max-mib", mib, "--rank-tsv", tsv, NULL};
        launcher_opts lo = {.nproc = ranks[ri], .argc = 5, .argv = args};
        launcher_result res;
        if (launcher_spawn(&lo, &res) != 0) {
            fprintf(stderr, "comm_allreduce: %d ranks failed: %s\n", ranks[ri], res.message);
            return 1;
        }
        fprintf(o, "## %d ranks\n\n| size | all-reduce time | algbw GB/s | busbw GB/s | memcpy GB/s | busbw / memcpy |\n"
                   "|---:|---:|---:|---:|---:|---:|\n", ranks[ri]);
        FILE *t = fopen(tsv, "r");
        size_t bytes;
        double secs;
        while (t && fscanf(t, "%zu %lf", &bytes, &secs) == 2) {
            double alg = bytes / secs / 1e9, bus = alg * 2 * (ranks[ri] - 1) / ranks[ri];
            double mc = bytes / memcpy_time(bytes) / 1e9;
            char sz[32];
            if (bytes >= (1u << 20)) snprintf(sz, sizeof sz, "%zu MiB", bytes >> 20);
            else snprintf(sz, sizeof sz, "%zu KiB", bytes >> 10);
            fprintf(o, "| %s | %.1f us | %.3f | %.3f | %.2f | %.3f |\n", sz, secs * 1e6, alg, bus, mc, bus / mc);
            printf("%d ranks %8s: %10.1f us  busbw %.3f GB/s  memcpy %.2f GB/s\n", ranks[ri], sz, secs * 1e6, bus, mc);
        }
        if (t) fclose(t);
        unlink(tsv);
        fprintf(o, "\n");
    }
    fclose(o);
    printf("wrote %s\n", out);
    return 0;
}
