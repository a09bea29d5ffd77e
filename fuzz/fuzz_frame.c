/* Fuzzes the frame decoder with arbitrary byte streams cut into arbitrary
 * chunks, and unpacks every frame it yields as the message its type names.
 * Invariants: no crash or leak; a yielded payload never exceeds the limit; once
 * the decoder fails it stays failed. */
#include <stdint.h>
#include <stdlib.h>

#include "frame.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t chunk = (size_t)(data[0] % 61) + 1;
    data++;
    size--;
    frame_decoder d;
    frame_decoder_init(&d, 4096);
    int failed = 0;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (frame_decoder_feed(&d, data + off, n)) {
            if (!failed && !d.failed) abort();
            break;
        }
        frame_header h;
        const uint8_t *p;
        int r;
        while ((r = frame_decoder_next(&d, &h, &p)) == 1) {
            if (h.len > 4096) abort();
            const ProtobufCMessageDescriptor *desc = msg_descriptor(h.type);
            if (desc) {
                ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, h.len, p);
                if (m) {
                    /* Re-encoding what decoded must not crash either. */
                    size_t len;
                    uint8_t *f = msg_frame(h.type, m, &len);
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
