#include "tensorboard.h"
#include "errf.h"

#include <errno.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

uint32_t tb_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    if (!table[1]) /* bit by bit, reflected polynomial 0x82f63b78 */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- the protobuf wire format, the few pieces an Event needs ---- */

typedef struct {
    unsigned char b[512];
    size_t n;
} buf;

static void put_byte(buf *o, unsigned v) { if (o->n < sizeof o->b) o->b[o->n++] = (unsigned char)v; }

static void put_varint(buf *o, uint64_t v)
{
    for (; v >= 0x80; v >>= 7) put_byte(o, (unsigned)(v & 0x7f) | 0x80);
    put_byte(o, (unsigned)v);
}

static void put_fixed(buf *o, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) put_byte(o, (unsigned)(v >> (8 * i)) & 0xff);
}

static void put_key(buf *o, int field, int wire) { put_varint(o, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_bytes(buf *o, int field, const void *p, size_t n)
{
    put_key(o, field, 2);
    put_varint(o, n);
    for (size_t i = 0; i < n; i++) put_byte(o, ((const unsigned char *)p)[i]);
}

static double wall_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* A write failed: said once, and the writer ends (training goes on). */
static void write_failed(tb_writer *w)
{
    fprintf(stderr, "atoll-train: --tensorboard-dir: writing %s failed (%s); no more TensorBoard events\n", w->path,
            strerror(errno));
    fclose(w->f);
    w->f = NULL;
}

/* Event { wall_time = 1 (double), step = 2 (int64) } then `what`, one framed record. */
static void write_event(tb_writer *w, long long step, const buf *what)
{
    if (!w->f) return;
    buf ev = { .n = 0 };
    double t = wall_s();
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    put_key(&ev, 1, 1);
    put_fixed(&ev, tb, 8);
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)step);
    for (size_t i = 0; i < what->n; i++) put_byte(&ev, what->b[i]);
    buf head = { .n = 0 }, tail = { .n = 0 };
    put_fixed(&head, ev.n, 8);
    put_fixed(&head, tb_masked_crc(tb_crc32c(head.b, 8)), 4);
    put_fixed(&tail, tb_masked_crc(tb_crc32c(ev.b, ev.n)), 4);
    if (fwrite(head.b, 1, head.n, w->f) != head.n || fwrite(ev.b, 1, ev.n, w->f) != ev.n ||
        fwrite(tail.b, 1, tail.n, w->f) != tail.n)
        write_failed(w);
}

int tb_open(tb_writer *w, const char *dir, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    if (atoll_mkdir_p(dir, 0755)) {
        atoll_errf(err, errlen, "--tensorboard-dir %s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)wall_s(), host,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof w->path) {
        atoll_errf(err, errlen, "--tensorboard-dir %s: the path is too long", dir);
        return -1;
    }
    if (!(w->f = fopen(w->path, "ab"))) {
        atoll_errf(err, errlen, "--tensorboard-dir %s: cannot write %s: %s", dir, w->path, strerror(errno));
        return -1;
    }
    buf v = { .n = 0 };
    put_bytes(&v, 3, "brain.Event:2", 13);
    write_event(w, 0, &v);
    tb_flush(w);
    if (!w->f) {
        atoll_errf(err, errlen, "--tensorboard-dir %s: cannot write %s", dir, w->path);
        return -1;
    }
    return 0;
}

void tb_scalar(tb_writer *w, const char *tag, long long step, double value)
{
    if (!w->f) return;
    size_t tl = strlen(tag);
    if (tl > 200) tl = 200;
    buf val = { .n = 0 }, sum = { .n = 0 };
    put_bytes(&val, 1, tag, tl);
    float f = (float)value;
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    put_key(&val, 2, 5);
    put_fixed(&val, fb, 4);
    put_bytes(&sum, 1, val.b, val.n);     /* Summary.value */
    buf what = { .n = 0 };
    put_bytes(&what, 5, sum.b, sum.n);    /* Event.summary */
    write_event(w, step, &what);
}

void tb_flush(tb_writer *w)
{
    if (w->f && fflush(w->f)) write_failed(w);
}

void tb_close(tb_writer *w)
{
    tb_flush(w);
    if (w->f) fclose(w->f);
    w->f = NULL;
}
