#include "cpu.h"

#include <string.h>

void kc_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          int N, int C, int vocab_offset, int V)
{
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - vocab_offset;
        float *o = out + (size_t)n * C;
        if (r >= 0 && r < V) memcpy(o, wte + (size_t)r * C, sizeof(float) * (size_t)C);
        else memset(o, 0, sizeof(float) * (size_t)C);
    }
}

void kc_embedding_backward(float *dwte, const float *dout, const int32_t *tokens,
                           int N, int C, int vocab_offset, int V)
{
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - vocab_offset;
        if (r < 0 || r >= V) continue;
        float *d = dwte + (size_t)r * C;
        const float *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

void kc_position_forward(float *out, const float *wpe, const int32_t *pos, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *p = wpe + (pos ? (size_t)pos[(size_t)b * T + t] : (size_t)t) * C;
            for (int c = 0; c < C; c++) o[c] += p[c];
        }
}

void kc_position_backward(float *dwpe, const float *dout, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *g = dout + ((size_t)b * T + t) * C;
            float *d = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
}
