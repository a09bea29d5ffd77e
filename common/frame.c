#include "frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void frame_header_encode(uint8_t out[FRAME_HEADER_LEN], uint16_t type, uint32_t len)
{
    out[0] = FRAME_MAGIC0;
    out[1] = FRAME_MAGIC1;
    out[2] = (uint8_t)(type >> 8);
    out[3] = (uint8_t)type;
    out[4] = (uint8_t)(len >> 24);
    out[5] = (uint8_t)(len >> 16);
    out[6] = (uint8_t)(len >> 8);
    out[7] = (uint8_t)len;
}

int frame_header_decode(const uint8_t in[FRAME_HEADER_LEN], uint32_t max, frame_header *h,
                        char *err, size_t errlen)
{
    if (in[0] != FRAME_MAGIC0 || in[1] != FRAME_MAGIC1) {
        snprintf(err, errlen, "bad frame: expected magic \"AT\" (41 54), got %02x %02x; "
                 "frames are 8-byte headers (magic, u16 type, u32 length) + protobuf", in[0], in[1]);
        return -1;
    }
    h->type = (uint16_t)(in[2] << 8 | in[3]);
    h->len = (uint32_t)in[4] << 24 | (uint32_t)in[5] << 16 | (uint32_t)in[6] << 8 | in[7];
    if (h->len > max) {
        snprintf(err, errlen, "frame too large: %u bytes of payload, the limit is %u", h->len, max);
        return -1;
    }
    return 0;
}

void frame_decoder_init(frame_decoder *d, uint32_t max_payload)
{
    memset(d, 0, sizeof *d);
    d->max = max_payload;
}

void frame_decoder_free(frame_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->start = d->end = d->cap = 0;
}

int frame_decoder_feed(frame_decoder *d, const void *data, size_t len)
{
    if (d->failed) return -1;
    if (!len) return 0;
    /* Slide unread bytes to the front before growing, so a long-lived connection
     * keeps a buffer the size of its largest frame. */
    if (d->start && d->start == d->end) d->start = d->end = 0;
    if (d->end + len > d->cap && d->start) {
        memmove(d->buf, d->buf + d->start, d->end - d->start);
        d->end -= d->start;
        d->start = 0;
    }
    if (d->end + len > d->cap) {
        size_t cap = d->cap ? d->cap : 4096;
        while (cap < d->end + len) cap *= 2;
        uint8_t *b = realloc(d->buf, cap);
        if (!b) {
            d->failed = 1;
            snprintf(d->err, sizeof d->err, "out of memory buffering a frame");
            return -1;
        }
        d->buf = b;
        d->cap = cap;
    }
    memcpy(d->buf + d->end, data, len);
    d->end += len;
    return 0;
}

int frame_decoder_next(frame_decoder *d, frame_header *h, const uint8_t **payload)
{
    if (d->failed) return -1;
    size_t avail = d->end - d->start;
    if (avail < FRAME_HEADER_LEN) return 0;
    if (frame_header_decode(d->buf + d->start, d->max, h, d->err, sizeof d->err)) {
        d->failed = 1;
        return -1;
    }
    if (avail - FRAME_HEADER_LEN < (size_t)h->len + d->trailer) return 0;
    *payload = d->buf + d->start + FRAME_HEADER_LEN;
    d->start += FRAME_HEADER_LEN + (size_t)h->len + d->trailer;
    return 1;
}

int frame_decoder_pending(const frame_decoder *d)
{
    if (d->failed) return 1;
    size_t avail = d->end - d->start;
    if (avail < FRAME_HEADER_LEN) return 0;
    const uint8_t *p = d->buf + d->start;
    uint32_t len = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
    if (p[0] != FRAME_MAGIC0 || p[1] != FRAME_MAGIC1 || len > d->max) return 1; /* next() reports it */
    return avail - FRAME_HEADER_LEN >= (size_t)len + d->trailer;
}

size_t frame_decoder_buffered(const frame_decoder *d) { return d->end - d->start; }
