/* LR schedule (Megatron's warmup + cosine/linear/constant), the clip
 * coefficient, and which tensors count toward the global gradient norm. */
#include "check.h"
#include "optimizer.h"

#include <math.h>
#include <string.h>

static void test_schedule(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.lr = 1.0; c.min_lr = 0.1; c.lr_warmup_iters = 10; c.train_iters = 110;
    CHECK_CLOSE(eng_lr_at(&c, 1), 0.1, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 10), 1.0, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 60), 0.55, 1e-12);          /* cosine midpoint */
    CHECK_CLOSE(eng_lr_at(&c, 35), 0.1 + 0.9 * 0.5 * (cos(M_PI * 0.25) + 1), 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 110), 0.1, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 500), 0.1, 1e-12);          /* after decay: min */
    c.lr_decay_style = LR_DECAY_LINEAR;
    CHECK_CLOSE(eng_lr_at(&c, 35), 1.0 - 0.9 * 0.25, 1e-12);
    c.lr_decay_iters = 60;
    CHECK_CLOSE(eng_lr_at(&c, 35), 1.0 - 0.9 * 0.5, 1e-12);
    c.lr_decay_style = LR_DECAY_CONSTANT;
    CHECK_CLOSE(eng_lr_at(&c, 100), 1.0, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 5), 0.5, 1e-12);            /* warmup still applies */
    c.lr_warmup_init = 0.2;                                 /* --lr-warmup-init: the warm-up rises from it */
    CHECK_CLOSE(eng_lr_at(&c, 5), 0.2 + 0.8 * 0.5, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 10), 1.0, 1e-12);
    /* WSD: --lr until the last 20 iterations before 110, then each decay style down to --min-lr */
    c.lr_warmup_init = 0;
    c.lr_decay_iters = 0;
    c.lr_decay_style = LR_DECAY_WSD;
    c.lr_wsd_decay_iters = 20;
    CHECK_CLOSE(eng_lr_at(&c, 5), 0.5, 1e-12);              /* the warm-up as before */
    CHECK_CLOSE(eng_lr_at(&c, 50), 1.0, 1e-12);             /* stable */
    CHECK_CLOSE(eng_lr_at(&c, 90), 1.0, 1e-12);             /* the decay starts after 90 */
    CHECK_CLOSE(eng_lr_at(&c, 100), 0.1 + 0.9 * (2 * sqrt(0.5) - 1), 1e-12); /* exponential: 2 x 0.5^r - 1 */
    CHECK_CLOSE(eng_lr_at(&c, 110), 0.1, 1e-12);
    c.lr_wsd_decay_style = WSD_LINEAR;
    CHECK_CLOSE(eng_lr_at(&c, 95), 0.1 + 0.9 * 0.75, 1e-12);
    c.lr_wsd_decay_style = WSD_COSINE;
    CHECK_CLOSE(eng_lr_at(&c, 95), 0.1 + 0.9 * 0.5 * (cos(M_PI * 0.25) + 1), 1e-12);
    c.lr_wsd_decay_style = WSD_MINUS_SQRT;
    CHECK_CLOSE(eng_lr_at(&c, 95), 0.1 + 0.9 * 0.5, 1e-12);  /* 1 - sqrt(1/4) */
    /* inverse square root after the warm-up, never below --min-lr, --min-lr past the decay */
    c.lr_decay_style = LR_DECAY_INVSQRT;
    CHECK_CLOSE(eng_lr_at(&c, 40), 0.5, 1e-12);             /* sqrt(10 / 40) */
    CHECK_CLOSE(eng_lr_at(&c, 109), sqrt(10.0 / 109), 1e-12);
    c.min_lr = 0.4;
    CHECK_CLOSE(eng_lr_at(&c, 109), 0.4, 1e-12);
    CHECK_CLOSE(eng_lr_at(&c, 500), 0.4, 1e-12);
}

static void test_clip(void)
{
    CHECK(eng_clip_scale(0.5, 1.0) == 1.0f, "below the limit: no scaling");
    CHECK_CLOSE(eng_clip_scale(4.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-6);
    CHECK(eng_clip_scale(100.0, 0.0) == 1.0f, "clip 0 disables clipping");
}

/* Every tensor's gradient 1; the padding between tensors stays 0, as the
 * model keeps it (eng_grad_sumsq sums runs of tensors across it). */
static void fill_tensors(eng_model *m)
{
    for (int t = 0; t < m->nparams; t++)
        for (size_t i = 0; i < m->table[t].numel; i++) m->grads[m->table[t].offset + i] = 1.0f;
}

static void test_norm_ownership(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 2; c.hidden_size = 16; c.num_attention_heads = 2; c.seq_length = 4; c.vocab_size = 32;
    char err[256];
    double full = 0;
    double part[2];
    eng_layout one = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &one, k_cpu(), err, sizeof err);
    fill_tensors(m);
    for (int t = 0; t < m->nparams; t++) full += (double)m->table[t].numel;
    CHECK(eng_grad_sumsq(m) == full, "single rank counts every element once (%g vs %g)", eng_grad_sumsq(m), full);
    eng_model_free(m);
    for (int r = 0; r < 2; r++) {
        eng_layout lay = eng_layout_single(&c);
        lay.tp_rank = r;
        lay.tp_size = 2;
        eng_model *s = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
        fill_tensors(s);
        part[r] = eng_grad_sumsq(s);
        eng_model_free(s);
    }
    CHECK(part[0] + part[1] == full, "tp=2: replicated tensors counted on rank 0 only (%g + %g vs %g)",
          part[0], part[1], full);
    eng_layout last = eng_layout_single(&c);
    last.layer_begin[0] = 1;
    eng_model *l = eng_model_create(&c, &last, k_cpu(), err, sizeof err);
    fill_tensors(l);
    const eng_param *copy = eng_find_param(l, "wte.weight");
    double expect = 0;
    for (int t = 0; t < l->nparams; t++) expect += l->table[t].tied_copy ? 0 : (double)l->table[t].numel;
    CHECK(copy && copy->tied_copy && eng_grad_sumsq(l) == expect, "the tied wte copy is not counted twice");
    eng_model_free(l);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_schedule();
    test_clip();
    test_norm_ownership();
    return check_summary(argv[0]);
}
