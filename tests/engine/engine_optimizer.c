/* LR schedule (Megatron's warmup + cosine/linear/constant), the clip
 * coefficient, and which tensors count toward the global gradient norm. */
#include "check.h"
#include "optimizer.h"

#include <math.h>
#include <stdio.h>
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

/* Megatron's weight-decay schedule (OptimizerParamScheduler.get_wd): from start
 * to end over the run's samples, in global batches; end after; constant is
 * --weight-decay whatever start and end hold. */
static void test_wd_schedule(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.train_iters = 100;
    c.weight_decay = 0.1;
    CHECK_CLOSE(eng_wd_at(&c, 0), 0.1, 1e-15);
    CHECK_CLOSE(eng_wd_at(&c, 1000), 0.1, 1e-15);
    c.start_weight_decay = 0.02, c.end_weight_decay = 0.3;
    c.weight_decay_incr_style = WD_INCR_LINEAR;
    CHECK_CLOSE(eng_wd_at(&c, 0), 0.02, 1e-15);
    CHECK_CLOSE(eng_wd_at(&c, 25), 0.02 + 0.28 * 0.25, 1e-15);
    CHECK_CLOSE(eng_wd_at(&c, 100), 0.3, 1e-15);
    CHECK_CLOSE(eng_wd_at(&c, 150), 0.3, 1e-15);
    c.weight_decay_incr_style = WD_INCR_COSINE;
    CHECK_CLOSE(eng_wd_at(&c, 25), 0.02 + 0.28 * 0.5 * (cos(M_PI * 0.75) + 1), 1e-15); /* slow start */
    CHECK_CLOSE(eng_wd_at(&c, 50), 0.16, 1e-15);
    CHECK_CLOSE(eng_wd_at(&c, 100), 0.3, 1e-15);
    /* with a ramp the span is the samples the run consumes, in global batches: 4 steps of 4 while fewer than 16
     * are consumed, then 96 of 8, 784 samples = 98 global batches */
    c.global_batch_size = 8;
    snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "4 4 16");
    double span = (double)cfg_samples_after(&c, 1, c.train_iters) / 8;
    CHECK(span == 98, "ramp: the run consumes %g global batches", span);
    CHECK_CLOSE(eng_wd_at(&c, span / 2), 0.16, 1e-12);
}

/* --decoupled-lr: the schedule's shape from the same warm-up start to its own
 * peak and floor; without it the embeddings take --lr's. */
static void test_decoupled(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.lr = 1.0; c.min_lr = 0.1; c.lr_warmup_iters = 10; c.train_iters = 110; c.lr_warmup_init = 0.2;
    CHECK_CLOSE(eng_decoupled_lr_at(&c, 60), eng_lr_at(&c, 60), 1e-15);
    c.decoupled_lr = 3.0;
    CHECK_CLOSE(eng_decoupled_lr_at(&c, 5), 0.2 + 2.8 * 0.5, 1e-12);  /* from --lr-warmup-init */
    CHECK_CLOSE(eng_decoupled_lr_at(&c, 60), 0.1 + 2.9 * 0.5, 1e-12); /* to --min-lr when no floor is given */
    c.decoupled_min_lr = 0.5;
    CHECK_CLOSE(eng_decoupled_lr_at(&c, 60), 0.5 + 2.5 * 0.5, 1e-12);
    CHECK_CLOSE(eng_decoupled_lr_at(&c, 200), 0.5, 1e-12);
    eng_rates r = eng_rates_at(&c, 60);
    CHECK(r.lr == eng_lr_at(&c, 60) && r.lr_decoupled == eng_decoupled_lr_at(&c, 60) && r.wd == c.weight_decay,
          "eng_rates_at: %g %g %g", r.lr, r.lr_decoupled, r.wd);
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
    CHECK(eng_grad_sumsq(m, NULL) == full, "single rank counts every element once (%g vs %g)",
          eng_grad_sumsq(m, NULL), full);
    /* --log-num-zeros-in-grad: every third element of each tensor 0; the zero padding between tensors is no
     * element and does not count */
    uint64_t zeros = 1, want = 0;
    double nonzero_sq = 0;
    for (int t = 0; t < m->nparams; t++)
        for (size_t i = 0; i < m->table[t].numel; i += 3, want++) m->grads[m->table[t].offset + i] = 0.0f;
    for (int t = 0; t < m->nparams; t++) nonzero_sq += (double)m->table[t].numel;
    nonzero_sq -= (double)want;
    CHECK(eng_grad_sumsq(m, &zeros) == nonzero_sq && zeros == want && want > 0, "zeros %llu, want %llu",
          (unsigned long long)zeros, (unsigned long long)want);
    eng_model_free(m);
    for (int r = 0; r < 2; r++) {
        eng_layout lay = eng_layout_single(&c);
        lay.tp_rank = r;
        lay.tp_size = 2;
        eng_model *s = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
        fill_tensors(s);
        part[r] = eng_grad_sumsq(s, NULL);
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
    CHECK(copy && copy->tied_copy && eng_grad_sumsq(l, NULL) == expect, "the tied wte copy is not counted twice");
    if (copy) memset(l->grads + copy->offset, 0, copy->numel * sizeof(float));
    uint64_t tied_zeros = 1;
    eng_grad_sumsq(l, &tied_zeros);
    CHECK(tied_zeros == 0, "the tied wte copy's zeros are not counted: %llu", (unsigned long long)tied_zeros);
    eng_model_free(l);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_schedule();
    test_wd_schedule();
    test_decoupled();
    test_clip();
    test_norm_ownership();
    return check_summary(argv[0]);
}
