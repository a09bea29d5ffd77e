"""par_train: atoll-train's parallel layouts compute the single-rank function.

Runs the tiny GPT (4 layers, hidden 64, 4 heads, vocab 256, seq 32, global batch
16, 10 steps) on one rank, then under the local launcher (host transport, CPU)
in each layout of the equivalence matrix: per-step losses must equal the
single-rank run within 1e-5 relative (grad norms within 1e-4). The matrix runs
again on a LLaMA-style model (RMSNorm, SwiGLU, rotary positions, 2 key/value
groups for 4 heads, biases on q, k and v alone as in Qwen2, untied, FFN 96) with hidden and attention
dropout 0.1 and evaluation every 5 steps on the validation split of a dataset
written here: training losses as above, validation losses within 1e-5. A Nemotron-style GPT (relu(x)^2 in
the MLP, LayerNorm weights stored as w and applied as 1 + w, rotary positions on half of each head, no linear
biases) runs in two layouts, the widest and full recompute, against its single rank. Then: resume a
tp2*pp2*dp2 ZeRO-1 checkpoint as tp1*pp4*dp2 and as dp8 with ZeRO-1 (other
shards of the optimizer state; losses continue as in the uninterrupted run),
--print-groups against an independent derivation of
Megatron's groups, a killed rank (the launcher stops the rest and fails within
seconds, naming the rank), and bad layouts (exit 2, one line naming the rule).

usage: par_train.py ATOLL_TRAIN WORKDIR
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import st_read  # noqa: E402

TRAIN, WORK = sys.argv[1], sys.argv[2]
MODEL = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 256 --seq-length 32 "
         "--micro-batch-size 2 --global-batch-size 16 --train-iters 10 --lr 1e-3 --lr-warmup-iters 2 "
         "--log-interval 1 --seed 7").split()
LLAMA = ("--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention "
         "--num-query-groups 2 --disable-bias-linear --add-qkv-bias --qk-layernorm --untie-embeddings-and-output-weights "
         "--ffn-hidden-size 96 "
         "--hidden-dropout 0.1 --attention-dropout 0.1 --split 7,3,0 --eval-interval 5 --eval-iters 2").split()
NEMOTRON = ("--squared-relu --apply-layernorm-1p --position-embedding-type rope --rotary-percent 0.5 --disable-bias-linear "
            "--untie-embeddings-and-output-weights").split()
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", ATOLL_COMM_TIMEOUT_MS="60000")
failures = []
STDOUT = {}  # each run's standard output, by name


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    if not ok:
        failures.append(msg)


def train(name, nproc, *flags):
    metrics = os.path.join(WORK, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [TRAIN] + MODEL + list(flags) + ["--metrics-file", metrics]
    if nproc > 1:
        cmd += ["--nproc-per-node", str(nproc)]
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, cwd=WORK, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, "%s: exit %d in %.1fs %s" % (name, p.returncode, time.time() - t0,
                                                          p.stderr.strip()[-300:]))
    STDOUT[name] = p.stdout
    steps = {}
    if os.path.exists(metrics):
        for line in open(metrics):
            j = json.loads(line)
            if "loss" in j:
                steps[j["iteration"]] = j
            if "valid_loss" in j:
                steps.setdefault("valid", {})[j["iteration"]] = j["valid_loss"]
    return steps


def compare(name, ref, got):
    valid, ref_valid = got.pop("valid", {}), ref.get("valid", {})
    ref = {i: v for i, v in ref.items() if i != "valid"}
    if not got or any(i not in ref for i in got):
        check(False, "%s: steps %s" % (name, sorted(got)))
        return
    lw = max(abs(got[i]["loss"] - ref[i]["loss"]) / abs(ref[i]["loss"]) for i in got)
    gw = max(abs(got[i]["grad_norm"] - ref[i]["grad_norm"]) / abs(ref[i]["grad_norm"]) for i in got)
    check(lw <= 1e-5 and gw <= 1e-4,
          "%s: %d steps, worst relative loss error %.2e, grad norm %.2e" % (name, len(got), lw, gw))
    if ref_valid:
        vw = max((abs(valid[i] - v) / v for i, v in ref_valid.items() if i in valid), default=1.0)
        check(sorted(valid) == sorted(ref_valid) and vw <= 1e-5,
              "%s: validation at iterations %s, worst relative error %.2e" % (name, sorted(valid), vw))


def write_dataset(prefix, docs):
    """Megatron's indexed dataset from byte tokens (uint16), written from the
    format: the idx header, sizes, byte pointers, doc_idx."""
    sizes = [len(d) + 1 for d in docs]
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(struct.pack("<%dH" % (len(d) + 1), *d, 0))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(docs), len(docs) + 1))
        f.write(struct.pack("<%di" % len(docs), *sizes))
        ptrs = [2 * sum(sizes[:i]) for i in range(len(docs))]
        f.write(struct.pack("<%dq" % len(docs), *ptrs))
        f.write(struct.pack("<%dq" % (len(docs) + 1), *range(len(docs) + 1)))


def bubble_ok(name, steps, p, m, v):
    last = steps[max(steps)]
    theory = (p - 1) / (v * m + p - 1)  # idle share of the step in an ideal schedule
    # measured: each stage's idle time over the step time, so a share in (0, 1];
    # transfer time is reported apart and idle + transfer cannot exceed the step
    check(abs(last["bubble_theory"] - theory) < 1e-6 and len(last["bubble_stages"]) == p
          and all(0 < b <= 1 for b in last["bubble_stages"])
          and len(last["transfer_stages"]) == p
          and all(0 <= t and b + t <= 1.0001 for b, t in zip(last["bubble_stages"], last["transfer_stages"])),
          "%s: bubble theory %.4f (want %.4f), measured per stage %s, transfer %s" %
          (name, last["bubble_theory"], theory, last["bubble_stages"], last["transfer_stages"]))


def read_safetensors(path):
    """name -> (shape, values) of every tensor of a checkpoint"""
    shapes, values = st_read.tensors(path), st_read.arrays(path)
    return {name: (shapes[name][1], values[name]) for name in shapes}


def same_tensors(name, ref_path, got_path):
    """Every tensor of a sharded save holds the single-rank values, so each
    shard landed at its place in the full shape. After 5 Adam steps summation
    order alone moves elements by up to ~1e-4 of a tensor's largest value (Adam
    divides small gradients by their own size); a misplaced slice moves O(1)."""
    try:
        a, b = read_safetensors(ref_path), read_safetensors(got_path)
    except (OSError, ValueError) as e:
        check(False, "%s: %s" % (name, e))
        return
    worst, where = 0.0, ""
    for k, (shape, x) in a.items():
        if k not in b or b[k][0] != shape:
            check(False, "%s: tensor %s missing or reshaped" % (name, k))
            return
        y = b[k][1]
        scale = max(max(abs(v) for v in x), 1e-12)
        err = max(abs(u - v) for u, v in zip(x, y)) / scale
        if err > worst:
            worst, where = err, k
    check(set(a) == set(b) and worst < 1e-3,
          "%s: %d tensors, worst relative difference %.2e (%s)" % (name, len(a), worst, where))


def children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def killed_rank():
    metrics = os.path.join(WORK, "kill.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    # dp3: every rank takes part in every step's all-reduce
    cmd = [TRAIN] + MODEL + ["--train-iters", "100000", "--nproc-per-node", "3", "--global-batch-size", "12",
                             "--metrics-file", metrics]
    p = subprocess.Popen(cmd, env=ENV, cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        time.sleep(0.1)
    kids = children(p.pid)
    check(len(kids) == 3, "kill: launcher has %d ranks running" % len(kids))
    if not kids:
        p.kill()
        return
    os.kill(sorted(kids)[1], signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    took = time.time() - t0
    left = [k for k in kids if os.path.exists("/proc/%d" % k) and open("/proc/%d/stat" % k).read().split()[2] != "Z"]
    check(p.returncode != 0 and took < 10 and not left and "rank" in err and "signal 9" in err,
          "kill: launcher exit %s after %.1fs, ranks left %s, message: %s" %
          (p.returncode, took, left, err.strip().splitlines()[-1:] if err.strip() else ""))


def print_groups():
    tp, pp, world = 2, 2, 16
    p = subprocess.run([TRAIN] + MODEL + ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size",
                                          str(pp), "--nproc-per-node", str(world), "--print-groups"],
                       env=ENV, capture_output=True, text=True, timeout=60)
    dp = world // (tp * pp)
    # Megatron's default order tp-cp-ep-dp-pp: rank = t + tp*(d + dp*s)
    rank = lambda t, d, s: t + tp * (d + dp * s)
    want = {
        "tp": [[rank(t, d, s) for t in range(tp)] for s in range(pp) for d in range(dp)],
        "dp": [[rank(t, d, s) for d in range(dp)] for s in range(pp) for t in range(tp)],
        "pp": [[rank(t, d, s) for s in range(pp)] for d in range(dp) for t in range(tp)],
    }
    try:
        got = json.loads(p.stdout)
    except ValueError:
        got = {}
    ok = p.returncode == 0 and all(sorted(got.get(k, [])) == sorted(v) for k, v in want.items())
    ok = ok and sorted(got.get("embedding", [])) == sorted(want["pp"])  # pp = 2: first and last stage
    check(ok, "--print-groups world %d tp %d pp %d: %s" % (world, tp, pp, p.stdout.strip()[:200]))
    p = subprocess.run([TRAIN, "--print-groups", "--tensor-model-parallel-size", "3", "--num-gpus", "8"] + MODEL,
                       env=ENV, capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "8" in p.stderr and "3" in p.stderr,
          "--print-groups with world 8, tp 3 refused: %s" % p.stderr.strip())


def bad_layouts():
    for flags, word in ((["--nproc-per-node", "3", "--tensor-model-parallel-size", "2"], "divisible"),
                        (["--nproc-per-node", "2", "--pipeline-model-parallel-size", "2",
                          "--num-layers-per-virtual-pipeline-stage", "3"], "virtual"),
                        (["--nproc-per-node", "2", "--pipeline-model-parallel-size", "2",
                          "--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "1"],
                         "must add up"),
                        (["--nproc-per-node", "2", "--pipeline-model-parallel-size", "2",
                          "--decoder-last-pipeline-num-layers", "1", "--num-layers-per-virtual-pipeline-stage", "1"],
                         "--num-virtual-stages-per-pipeline-rank instead"),
                        (["--nproc-per-node", "2", "--pipeline-model-parallel-size", "2",
                          "--decoder-last-pipeline-num-layers", "1", "--num-virtual-stages-per-pipeline-rank", "2"],
                         "is not a multiple of 2"),
                        (["--nproc-per-node", "0"], "--nproc-per-node")):
        p = subprocess.run([TRAIN] + MODEL + flags, env=ENV, capture_output=True, text=True, timeout=60)
        line = p.stderr.strip()
        check(p.returncode == 2 and word in line and len(line.splitlines()) == 1,
              "%s: exit %d, %s" % (" ".join(flags), p.returncode, line))


def main():
    os.makedirs(WORK, exist_ok=True)
    ref = train("single", 1)
    first, last = ref.get(1, {}).get("loss", 0), ref.get(10, {}).get("loss", 0)
    check(len(ref) == 10 and last < first - 0.3, "single rank: loss %.4f -> %.4f over 10 steps" % (first, last))
    tp2, pp2, vpp, sp = (["--tensor-model-parallel-size", "2"], ["--pipeline-model-parallel-size", "2"],
                         ["--num-layers-per-virtual-pipeline-stage", "1"], ["--sequence-parallel"])
    zero, sel = ["--use-distributed-optimizer"], ["--recompute-granularity", "selective"]
    first1, last1 = ["--decoder-first-pipeline-num-layers", "1"], ["--decoder-last-pipeline-num-layers", "1"]
    matrix = [
        ("tp2", 2, tp2), ("tp2_sp", 2, tp2 + sp), ("pp2", 2, pp2),
        ("pp4", 4, ["--pipeline-model-parallel-size", "4"]), ("pp2_v2", 2, pp2 + vpp), ("dp2", 2, []),
        # Megatron's --microbatch-group-size-per-virtual-pipeline-stage: the 8 micro-batches as 3, 3, 2
        ("pp2_v2_group3", 2, pp2 + vpp + ["--microbatch-group-size-per-virtual-pipeline-stage", "3"]),
        ("dp2_zero1", 2, zero), ("tp2_pp2_dp2", 8, tp2 + pp2),
        ("tp2_pp2_dp2_sp_full_recompute", 8, tp2 + pp2 + sp + ["--recompute-granularity", "full"]),
        # Megatron's uniform groups: layers 0-2 rebuilt together (TP collectives inside), then layer 3; and a
        # group of a whole stage
        ("tp2_sp_full_uniform3", 2, tp2 + sp + ["--recompute-granularity", "full", "--recompute-method", "uniform",
                                                "--recompute-num-layers", "3"]),
        ("pp2_full_uniform2", 2, pp2 + ["--recompute-granularity", "full", "--recompute-method", "uniform",
                                        "--recompute-num-layers", "2"]),
        # uneven stages: layers 1, 2, 1 and 3, 1 (the last stage's share taken by its LM head)
        ("pp3_first1_last1", 3, ["--pipeline-model-parallel-size", "3"] + first1 + last1),
        ("tp2_pp2_last1", 4, tp2 + pp2 + last1),
    ]
    for name, n, flags in matrix:
        got = train(name, n, *flags)
        compare(name, ref, got)
    for name, split in (("pp3_first1_last1", "1, 2, 1"), ("tp2_pp2_last1", "3, 1")):
        check("layers per stage %s)" % split in STDOUT.get(name, ""),
              "%s: the ranks hold layers %s: %s" % (name, split, STDOUT.get(name, "").splitlines()[1:2]))
    # 5 micro-batches on pp 2 run interleaved only in groups (of 3 and 2): Megatron's PP2 M5 example
    compare("pp2_v2_m5_group3", train("single_gbs10", 1, "--global-batch-size", "10"),
            train("pp2_v2_m5_group3", 2, *(pp2 + vpp + ["--global-batch-size", "10",
                                                      "--microbatch-group-size-per-virtual-pipeline-stage", "3"])))
    # uneven stages, interleaved (Megatron-Core's --num-virtual-stages-per-pipeline-rank): 6 layers as 2 and 4,
    # each stage's split over its 2 chunks, the chunks in rounds (layers 0 | 1-2 | 3 | 4-5)
    six = ["--num-layers", "6"]
    uneven_v2 = six + pp2 + ["--num-virtual-stages-per-pipeline-rank", "2"] + ["--decoder-first-pipeline-num-layers", "2",
                                                                                "--decoder-last-pipeline-num-layers", "4"]
    compare("pp2_v2_first2_last4", train("single_6layers", 1, *six), train("pp2_v2_first2_last4", 2, *uneven_v2))
    check("layers per stage 2, 4)" in STDOUT.get("pp2_v2_first2_last4", "") and
          "2 model chunks per rank" in STDOUT.get("pp2_v2_first2_last4", ""),
          "pp2_v2_first2_last4: 2 chunks per rank, layers 2 and 4: %s" % STDOUT.get("pp2_v2_first2_last4", "").splitlines()[1:2])
    everything = train("tp2_pp2_dp2_vpp_sp_zero1_selective", 8, *(tp2 + pp2 + vpp + sp + zero + sel))
    compare("tp2_pp2_dp2_vpp_sp_zero1_selective", ref, everything)
    if everything:
        bubble_ok("tp2_pp2_dp2_vpp_sp_zero1_selective", everything, 2, 4, 2)

    # the LLaMA family with dropout and evaluation, in every layout
    words = ("the harbour master kept a ledger of every boat that came into the lagoon each morning he wrote "
             "the name of the boat the weight of its catch and the direction of the wind").split()
    docs = [" ".join(words[(7 * i + j) % len(words)] for j in range(60 + 9 * i)).encode() for i in range(10)]
    write_dataset(os.path.join(WORK, "words"), docs)
    llama = LLAMA + ["--data-path", os.path.join(WORK, "words")]
    lref = train("llama_single", 1, *llama)
    drop = train("llama_single_nodrop", 1, *[a if a != "0.1" else "0" for a in llama])
    check(len(lref) == 11 and sorted(lref.get("valid", {})) == [5, 10] and drop.get(1, {}).get("loss") not in
          (None, lref.get(1, {}).get("loss")), "LLaMA single rank: 10 steps, validation at 5 and 10, dropout changes "
          "the loss (%s vs %s)" % (lref.get(1, {}).get("loss"), drop.get(1, {}).get("loss")))
    for name, n, flags in matrix + [("tp2_pp2_dp2_vpp_sp_zero1_selective", 8, tp2 + pp2 + vpp + sp + zero + sel)]:
        compare("llama " + name, lref, train("llama_" + name, n, *(llama + flags)))
    # the heads' norms (--qk-layernorm): each TP rank's gradient covers its heads, the ranks sum them, so a
    # tp2 save holds the single rank's weights (left unsummed they drift ~1e-2 apart, the losses barely move)
    lck = [os.path.join(WORK, "llama_ck_" + n) for n in ("single", "tp2")]
    for d in lck:
        shutil.rmtree(d, ignore_errors=True)
    train("llama_save_single", 1, *(llama + ["--save", lck[0]]))
    train("llama_save_tp2", 2, *(llama + tp2 + ["--save", lck[1]]))
    same_tensors("LLaMA tp2 model.safetensors (q_norm, k_norm summed over TP)",
                 *[os.path.join(d, "iter_0000010", "model.safetensors") for d in lck])

    # Nemotron-style: the 1 + w weights each rank derives from its own copy, and the squared ReLU between the
    # column- and row-parallel GEMMs
    nref = train("nemotron_single", 1, *NEMOTRON)
    check(len(nref) == 10 and nref.get(1, {}).get("loss") not in (None, ref.get(1, {}).get("loss")),
          "Nemotron-style single rank: 10 steps, a model of its own (loss %s vs %s)" %
          (nref.get(1, {}).get("loss"), ref.get(1, {}).get("loss")))
    for name, n, flags in (("tp2_pp2_dp2_vpp_sp_zero1_selective", 8, tp2 + pp2 + vpp + sp + zero + sel),
                           ("tp2_pp2_dp2_sp_full_recompute", 8, tp2 + pp2 + sp + ["--recompute-granularity", "full"])):
        compare("nemotron " + name, nref, train("nemotron_" + name, n, *(NEMOTRON + flags)))

    # Megatron's weight-decay schedule and --decoupled-lr reach every rank's optimizer, ZeRO-1 shards and the
    # last stage's copy of the tied embedding too
    wd = ["--weight-decay-incr-style", "linear", "--start-weight-decay", "0.5", "--end-weight-decay", "3",
          "--decoupled-lr", "1e-2"]
    wref = train("wd_single", 1, *wd)
    check(len(wref) == 10 and wref.get(10, {}).get("loss") not in (None, ref.get(10, {}).get("loss")),
          "weight-decay schedule and --decoupled-lr, single rank: 10 steps, other weights (loss %s vs %s)" %
          (wref.get(10, {}).get("loss"), ref.get(10, {}).get("loss")))
    for name, n, flags in (("dp2_zero1", 2, zero), ("tp2_pp2_dp2", 8, tp2 + pp2)):
        compare("wd " + name, wref, train("wd_" + name, n, *(wd + flags)))

    ck = os.path.join(WORK, "ckpt")
    shutil.rmtree(ck, ignore_errors=True)
    train("save_tp2_pp2_dp2", 8, *(tp2 + pp2 + zero + ["--save", ck, "--exit-interval", "5"]))
    ref_ck = os.path.join(WORK, "ckpt_single")
    shutil.rmtree(ref_ck, ignore_errors=True)
    train("save_single", 1, "--save", ref_ck, "--exit-interval", "5")
    for f in ("model.safetensors", "optim.safetensors"):
        same_tensors("ZeRO-1 tp2*pp2*dp2 " + f, os.path.join(ref_ck, "iter_0000005", f),
                     os.path.join(ck, "iter_0000005", f))
    resumes = [("resume_tp1_pp4_dp2", ["--pipeline-model-parallel-size", "4"]), ("resume_dp8_zero1", zero),
               ("resume_pp2_last1_dp4", pp2 + last1)]
    for name, flags in resumes:
        got = train(name, 8, *(flags + ["--load", ck]))
        check(sorted(got) == list(range(6, 11)), "%s: resumed at iteration 6 (%s)" % (name, sorted(got)))
        compare(name, ref, got)

    print_groups()
    bad_layouts()
    killed_rank()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


sys.exit(main())
