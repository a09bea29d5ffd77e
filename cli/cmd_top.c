/* atoll top [JOB]: a live view of the cluster's jobs, redrawn every second in a
 * full-screen terminal (any size from 80x24; plain ANSI escapes, so it works over
 * ssh and in tmux). One line per job (state, step, loss, tokens/s, TFLOP/s per
 * GPU, MFU, bubble), then the selected job (JOB, else the newest running one)
 * per pipeline stage: measured bubble, theory, transfer. `q` quits. --once draws
 * one frame as plain text; --json prints the same snapshot as JSON. */
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"

typedef struct screen {
    char **lines;
    int n, cap, width;
} screen;

static void put(screen *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(screen *s, const char *fmt, ...)
{
    if (s->n == s->cap) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if ((int)strlen(buf) > s->width) buf[s->width] = 0; /* never wrap: it would scroll the screen */
    s->lines[s->n++] = strdup(buf);
}

static volatile sig_atomic_t g_quit;
static void on_quit(int sig) { (void)sig; g_quit = 1; }

static const Atoll__Job *pick(const Atoll__JobsReply *all, uint64_t want)
{
    const Atoll__Job *best = NULL;
    for (size_t i = 0; i < all->n_jobs; i++) {
        const Atoll__Job *j = all->jobs[i];
        if (want && j->id == want) return j;
        if (!want && j->state == ATOLL__JOB_STATE__JOB_RUNNING) best = j; /* the newest running one */
    }
    if (!best && !want && all->n_jobs) best = all->jobs[all->n_jobs - 1];
    return best;
}

static void bar(char *out, size_t len, double v, int width)
{
    int full = v < 0 ? 0 : v > 1 ? width : (int)(v * width + 0.5), k = 0;
    for (int i = 0; i < width && (size_t)k + 4 < len; i++) {
        const char *g = i < full ? "#" : ".";
        k += snprintf(out + k, len - (size_t)k, "%s", g);
    }
}

/* One frame. 0, or the CLI's exit status when the coordinator refused/was away. */
static int frame(cli_ctx *c, uint64_t want, screen *s, int json)
{
    Atoll__JobsReply *all = NULL, *one = NULL;
    int rc = cli_fetch_job(c, 0, 0, &all);
    if (rc) return rc;
    const Atoll__Job *sel = pick(all, want);
    if (sel && (rc = cli_fetch_job(c, sel->id, 0, &one))) {
        atoll__jobs_reply__free_unpacked(all, NULL);
        return rc;
    }
    const Atoll__Job *detail = one && one->n_jobs ? one->jobs[0] : NULL;
    if (json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "jobs");
        jsonw_arr(&w);
        for (size_t i = 0; i < all->n_jobs; i++) msg_json_job(&w, all->jobs[i]);
        jsonw_arr_end(&w);
        jsonw_key(&w, "selected");
        if (detail) msg_json_job(&w, detail);
        else jsonw_null(&w);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        char now[32];
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(now, sizeof now, "%H:%M:%S", &tm);
        put(s, "atoll top - %s - %s UTC - %zu jobs   (q quits)", c->coordinator, now, all->n_jobs);
        put(s, "%s", "");
        put(s, "%-4s %-10s %-9s %-10s %-7s %-8s %-8s %-5s %s", "JOB", "NAME", "STATE", "STEP", "LOSS", "TOKENS/S",
            "TF/GPU", "MFU", "BUBBLE m/t");
        /* active jobs first, newest first; finished ones after */
        for (int pass = 0; pass < 2; pass++)
            for (size_t k = all->n_jobs; k-- > 0;) {
                const Atoll__Job *j = all->jobs[k];
                int active = j->state <= ATOLL__JOB_STATE__JOB_RESTARTING;
                if (active != (pass == 0)) continue;
                const Atoll__JobMetrics *m = j == sel && detail ? detail->metrics : j->metrics;
                int have = m && m->step > 0;
                char step[32] = "-", loss[16] = "-", tps[16] = "-", tfl[16] = "-", mfu[16] = "-", bub[24] = "-";
                if (have) {
                    if (j->spec && j->spec->train_iters)
                        snprintf(step, sizeof step, "%lld/%d", (long long)m->step, j->spec->train_iters);
                    else snprintf(step, sizeof step, "%lld", (long long)m->step);
                    snprintf(loss, sizeof loss, "%.3f", m->loss);
                    snprintf(tps, sizeof tps, "%.0f", m->tokens_per_s);
                    if (m->flops_per_gpu > 0) snprintf(tfl, sizeof tfl, "%.4f", m->flops_per_gpu / 1e12);
                    if (msg_mfu_known(m)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * m->mfu);
                    else snprintf(mfu, sizeof mfu, "n/a");
                    snprintf(bub, sizeof bub, "%.3f/%.3f", m->bubble_measured, m->bubble_theory);
                }
                put(s, "%-4llu %-10.10s %-9s %-10s %-7s %-8s %-8s %-5s %s", (unsigned long long)j->id, j->name,
                    msg_job_state_name(j->state), step, loss, tps, tfl, mfu, bub);
            }
        if (!all->n_jobs) put(s, "(no jobs; `atoll submit ... --num-gpus N` queues one)");
        if (detail) {
            const Atoll__JobMetrics *m = detail->metrics;
            put(s, "%s", "");
            put(s, "job %llu (%s): %s - tp %d, pp %d, dp %d, vpp %d on %d ranks", (unsigned long long)detail->id,
                detail->name, msg_job_state_name(detail->state), detail->tp, detail->pp, detail->dp, detail->vpp,
                detail->spec ? detail->spec->num_gpus : 0);
            put(s, "  %.60s", detail->message);
            if (m && m->step > 0) {
                char mfu[64];
                if (msg_mfu_known(m)) snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100 * m->mfu);
                else snprintf(mfu, sizeof mfu, "MFU n/a (CPU)");
                put(s, "  step %lld: loss %.4f  lr %.2e  %.1f ms/step  %s", (long long)m->step, m->loss, m->lr,
                    m->step_ms, mfu);
                put(s, "  %.0f tokens/s, %.3f TFLOP/s per GPU, peak memory %.0f MiB per rank", m->tokens_per_s,
                    m->flops_per_gpu / 1e12, m->memory_bytes / 1048576.0);
                put(s, "  %-6s %-9s %-7s %-9s %-6s %s", "STAGE", "MEASURED", "THEORY", "TRANSFER", "LAYERS",
                    "IDLE SHARE OF THE STEP");
                for (size_t i = 0; i < m->n_stages && detail->pp > 1; i++) {
                    const Atoll__StageBubble *b = m->stages[i];
                    char meas[16] = "-", xf[16] = "-", graph[96], layers[16] = "-";
                    int nl = msg_stage_layers(detail, b->stage);
                    if (nl >= 0) snprintf(layers, sizeof layers, "%d", nl);
                    if (b->measured >= 0) snprintf(meas, sizeof meas, "%.3f", b->measured);
                    if (b->transfer >= 0) snprintf(xf, sizeof xf, "%.3f", b->transfer);
                    bar(graph, sizeof graph, b->measured, 30);
                    put(s, "  %-6d %-9s %-7.3f %-9s %-6s %s", b->stage, meas, b->theory, xf, layers, graph);
                }
                if (detail->pp <= 1) put(s, "  no pipeline (pp 1): no bubble");
            } else {
                put(s, "  no step reported yet");
            }
        }
    }
    if (one) atoll__jobs_reply__free_unpacked(one, NULL);
    atoll__jobs_reply__free_unpacked(all, NULL);
    return 0;
}

static void screen_reset(screen *s, int width, int height)
{
    for (int i = 0; i < s->n; i++) free(s->lines[i]);
    s->n = 0;
    s->width = width;
    if (s->cap != height) {
        free(s->lines);
        s->cap = height;
        s->lines = calloc((size_t)height, sizeof *s->lines);
    }
}

int cmd_top(cli_ctx *c, int argc, char **argv)
{
    uint64_t want = 0;
    int once = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--once")) once = 1;
        else if (!want && !cli_job_id(argv[i], &want)) continue;
        else return cli_usage(c, "top", "unexpected argument '%s'", argv[i]);
    }
    screen s = { 0 };
    if (c->json || once || !isatty(STDOUT_FILENO)) {
        screen_reset(&s, 200, 200);
        int rc = frame(c, want, &s, c->json);
        for (int i = 0; i < s.n; i++) puts(s.lines[i]);
        screen_reset(&s, 0, 0);
        free(s.lines);
        return rc;
    }
    struct termios old, raw;
    int tty_in = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
    if (tty_in) {
        raw = old;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    signal(SIGINT, on_quit);
    signal(SIGTERM, on_quit);
    signal(SIGHUP, on_quit);
    fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
    int rc = 0;
    while (!g_quit) {
        struct winsize ws = { 0 };
        int w = 80, h = 24;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) w = ws.ws_col, h = ws.ws_row;
        screen_reset(&s, w, h - 1);
        rc = frame(c, want, &s, 0);
        fputs("\033[H\033[2J", stdout);
        if (rc) printf("atoll top: the coordinator at %s did not answer (see above); retrying every second\r\n",
                       c->coordinator);
        for (int i = 0; i < s.n; i++) printf("%s\r\n", s.lines[i]);
        fflush(stdout);
        /* a second, or until a key */
        struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
        if (poll(&p, 1, 1000) > 0) {
            char ch;
            if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q')) break;
            if (p.revents & (POLLHUP | POLLERR)) break;
        }
    }
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (tty_in) tcsetattr(STDIN_FILENO, TCSANOW, &old);
    screen_reset(&s, 0, 0);
    free(s.lines);
    return 0;
}
