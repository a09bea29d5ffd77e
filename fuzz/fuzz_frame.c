/* Fuzzes the frame decoder with arbitrary byte streams cut into arbitrary
 * chunks, and unpacks every frame it yields as the message its type names. When
 * the first byte says so, the stream switches after its first frame to tagged
 * frames (as after the handshake) and each tag is checked as rpc.c does.
 * Invariants: no crash or leak; a yielded payload never exceeds the limit; once
 * the decoder fails it stays failed; frame_decoder_pending agrees with
 * frame_decoder_next. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "frame.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t chunk = (size_t)(data[0] % 61) + 1;
    int sealed = data[0] >= 128;
    data++;
    size--;
    frame_decoder d;
    frame_decoder_init(&d, 4096);
    auth_token tok = { .len = 32 };
    memset(tok.bytes, 'k', 32);
    uint8_t n[AUTH_NONCE_LEN] = { 0 }, cn[AUTH_NONCE_LEN] = { 1 };
    auth_session sess;
    auth_session_init(&sess, &tok, n, cn, 0);
    int failed = 0, frames = 0;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (frame_decoder_feed(&d, data + off, n)) {
            if (!failed && !d.failed) abort();
            break;
        }
        frame_header h;
        const uint8_t *p;
        int r;
        for (;;) {
            int pending = frame_decoder_pending(&d);
            r = frame_decoder_next(&d, &h, &p);
            if (pending != (r != 0)) abort();
            if (r != 1) break;
            if (h.len > 4096) abort();
            if (d.trailer) (void)auth_session_open(&sess, p - FRAME_HEADER_LEN, FRAME_HEADER_LEN + h.len, p + h.len);
            if (sealed && ++frames == 1) d.trailer = AUTH_TAG_LEN;
            const ProtobufCMessageDescriptor *desc = msg_descriptor(h.type);
            if (desc) {
                ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, h.len, p);
                if (m) {
                    /* Re-encoding what decoded must not crash either. */
                    size_t len;
                    uint8_t *f = msg_frame(h.type, m, 0, &len);
                    free(f);
                    protobuf_c_message_free_unpacked(m, NULL);
                }
            }
        }
        if (r < 0) {
            failed = 1;
            if (frame_decoder_next(&d, &h, &p) != -1) abort();
        }
    }
    frame_decoder_free(&d);
    return 0;
}
