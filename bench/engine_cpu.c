/* engine_cpu: how close the CPU engine gets to the machine's GEMM rate.
 *
 * Trains a 4-layer, hidden-256, 8-head GPT (seq 256, vocab 256) for a few
 * iterations on random tokens and reports tokens/s and achieved FLOP/s (PaLM
 * count, 6N + 12*L*h*T per token), then measures CBLAS SGEMM at a large square
 * size and at the model's own GEMM shape in the same process. The ratio
 * model FLOP/s : SGEMM FLOP/s is the figure to track.
 *
 * usage: engine_cpu [--iters N] [--micro-batch-size B] [--out FILE.md] */
#include "errf.h"
#include "model.h"
#include "optimizer.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* GFLOP/s of C[M,N] = A[M,K] B[K,N]^T, best of `reps` after a warm-up. */
static double sgemm_gflops(int M, int N, int K, int reps)
{
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)N * K),
          *c = malloc(sizeof(float) * (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = atoll_mono_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double dt = atoll_mono_s() - t0;
        if (dt < best) best = dt;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * M * N * K / best / 1e9;
}

static void cpu_name(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':');
            if (v) snprintf(out, n, "%s", v + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

int main(int argc, char **argv)
{
    int iters = 5, mbs = 4;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--micro-batch-size")) mbs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
    }
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 4; c.hidden_size = 256; c.num_attention_heads = 8; c.seq_length = 256;
    c.vocab_size = 256; c.micro_batch_size = mbs; c.global_batch_size = mbs; c.lr = 1e-4;
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    if (!m) { fprintf(stderr, "engine_cpu: %s\n", err); return 1; }
    eng_init_params(m, 1);
    eng_optim *o = eng_optim_create(m);
    eng_rates rates = { 1e-4, 1e-4, c.weight_decay };
    eng_acts *a = eng_acts_create(m, 0);
    int N = mbs * c.seq_length;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *tgt = malloc(sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) { tok[i] = (i * 131 + 7) % 256; tgt[i] = (i * 37 + 3) % 256; }

    double t_fwd = 0, t_bwd = 0, t_opt = 0, loss = 0, best = 1e30;
    for (int it = 0; it <= iters; it++) { /* iteration 0 warms up */
        double t0 = atoll_mono_s();
        eng_zero_grads(m);
        eng_forward(m, a, tok, NULL, tgt, 0.0f, &loss);
        double t1 = atoll_mono_s();
        eng_backward(m, a, NULL, 1.0f / (float)N);
        double t2 = atoll_mono_s();
        eng_optim_step(o, m, &rates, 1.0f, it + 1);
        double t3 = atoll_mono_s();
        if (it) { t_fwd += t1 - t0; t_bwd += t2 - t1; t_opt += t3 - t2; }
        if (it && t3 - t0 < best) best = t3 - t0;
    }
    /* The fastest step against the fastest GEMM: both are the machine's rate with
     * the least interference from other work on it. */
    double step = (t_fwd + t_bwd + t_opt) / iters;
    double tokens_per_s = N / best, flops = cfg_flops_per_token(&c) * N / best / 1e9;
    double g_square = sgemm_gflops(1024, 1024, 1024, 10);
    double g_model = sgemm_gflops(N, 4 * c.hidden_size, c.hidden_size, 10); /* the c_fc GEMM */

    char cpu[256], date[64];
    cpu_name(cpu, sizeof cpu);
    struct utsname u;
    uname(&u);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) { perror(out); return 1; }
    fprintf(f, "# engine_cpu: CPU training throughput vs CBLAS SGEMM\n\n");
    fprintf(f, "- machine: `%s %s %s %s`, CPU: %s, %ld cores online\n", u.sysname, u.nodename, u.release,
            u.machine, cpu, sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "- command: `engine_cpu --iters %d --micro-batch-size %d%s%s`\n", iters, mbs, out ? " --out " : "",
            out ? out : "");
    fprintf(f, "- date: %s\n", date);
    fprintf(f, "- model: 4 layers, hidden 256, 8 heads, seq 256, vocab 256, %.0f parameters, "
               "micro-batch %d (%d tokens per step), fp32, OpenBLAS\n\n", cfg_num_params(&c), mbs, N);
    fprintf(f, "| measure | value |\n| --- | --- |\n");
    fprintf(f, "| step time (forward + backward + AdamW), best / mean | %.1f / %.1f ms |\n", best * 1e3, step * 1e3);
    fprintf(f, "| of which forward / backward / optimizer (mean) | %.1f / %.1f / %.1f ms |\n", t_fwd / iters * 1e3,
            t_bwd / iters * 1e3, t_opt / iters * 1e3);
    fprintf(f, "| tokens/s (best step) | %.0f |\n", tokens_per_s);
    fprintf(f, "| achieved model GFLOP/s (PaLM count) | %.2f |\n", flops);
    fprintf(f, "| SGEMM GFLOP/s, 1024x1024x1024 (best of 10) | %.2f |\n", g_square);
    fprintf(f, "| SGEMM GFLOP/s, model shape %dx%dx%d | %.2f |\n", N, 4 * c.hidden_size, c.hidden_size, g_model);
    fprintf(f, "| **model / SGEMM (1024^3) ratio** | **%.2f** |\n", flops / g_square);
    fprintf(f, "\nFinal loss on the fixed random batch: %.4f (a sanity figure, not a benchmark).\n",
            loss / N);
    if (out) fclose(f);
    printf("engine_cpu: %.0f tokens/s, %.2f GFLOP/s, SGEMM %.2f GFLOP/s, ratio %.2f\n", tokens_per_s, flops,
           g_square, flops / g_square);
    eng_acts_free(m, a);
    eng_optim_free(o);
    eng_model_free(m);
    free(tok);
    free(tgt);
    return 0;
}
