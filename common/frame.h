/* frame: the byte framing of every atoll RPC connection (spec: proto/README.md).
 *
 *   offset 0  2 bytes  magic "AT" (0x41 0x54)
 *   offset 2  2 bytes  message type (MsgType in atoll.proto), big-endian
 *   offset 4  4 bytes  payload length, big-endian, at most the receiver's limit
 *   offset 8  payload: the protobuf encoding of the message named by the type
 *   then      `trailer` bytes not counted in the length: after the handshake, the
 *             frame's tag (auth.h); none before it
 *
 * The decoder is a pure byte-stream parser (no I/O) so it can be fuzzed and unit
 * tested. It owns its buffer; payload pointers it returns stay valid until the
 * next frame_decoder_feed/next/free call. */
#ifndef ATOLL_FRAME_H
#define ATOLL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC0 0x41 /* 'A' */
#define FRAME_MAGIC1 0x54 /* 'T' */
#define FRAME_HEADER_LEN 8
#define FRAME_MAX_DEFAULT (16u << 20)

typedef struct frame_header {
    uint16_t type;
    uint32_t len;
} frame_header;

void frame_header_encode(uint8_t out[FRAME_HEADER_LEN], uint16_t type, uint32_t len);

/* 0, or -1 with err saying what was wrong (magic, or a length over `max`). */
int frame_header_decode(const uint8_t in[FRAME_HEADER_LEN], uint32_t max, frame_header *h,
                        char *err, size_t errlen);

typedef struct frame_decoder {
    uint8_t *buf;
    size_t start, end, cap;   /* unread bytes are buf[start..end) */
    uint32_t max;             /* payload limit; may change between frames */
    uint32_t trailer;         /* bytes after each payload (the tag); may change between frames */
    int failed;               /* sticky: the stream cannot be resynchronised */
    char err[160];
} frame_decoder;

void frame_decoder_init(frame_decoder *d, uint32_t max_payload);
void frame_decoder_free(frame_decoder *d);

/* Appends received bytes. -1 when out of memory or the decoder already failed. */
int frame_decoder_feed(frame_decoder *d, const void *data, size_t len);

/* 1: a whole frame is ready (*h, *payload set; the header is at payload - 8 and
 * the trailer at payload + h->len); 0: need more bytes;
 * -1: the stream is bad (d->err says why; the connection should be closed,
 * since no later byte can be trusted to start a frame). A bad header is
 * reported as soon as its 8 bytes arrive, before any payload is buffered. */
int frame_decoder_next(frame_decoder *d, frame_header *h, const uint8_t **payload);

/* 1 when frame_decoder_next would return non-zero now (a whole frame, or a bad
 * header, is buffered). */
int frame_decoder_pending(const frame_decoder *d);

/* Bytes received and not yet returned as frames. */
size_t frame_decoder_buffered(const frame_decoder *d);

#endif
