#!/usr/bin/env python3
"""Attacks on a running coordinatord, each asserting the coordinator's answer
(ctl_it.sh checks that it keeps serving: heartbeat round trips, node states).
Written from proto/README.md with Python's protobuf package (ctl_py_client.py).

usage: ctl_attack.py CASE PORT TOKEN_FILE GENERATED_DIR [ARGS...]
  input              job specs that overflowed the layout arithmetic (SIGFPE before),
                     non-finite and negative hyper-parameters, bad request ids
  preauth PID        partial 16 MiB frames and half-sent handshakes before
                     authenticating (the coordinator's RSS must stay flat), and a burst
                     of 200 wrong MACs from one address (throttled)
  mitm MODE          a relay between a client and the coordinator alters, injects,
                     drops or replays one frame (MODE alter|inject|drop|replay|alter-reply);
                     the coordinator (or the client) detects it and refuses
  relay MODE PORTFILE  the same relay for another client (the atoll CLI): listens on a
                     port written to PORTFILE, relays one connection, then exits
  flood N PID        pipelines N JobsRequests for every job on one connection and
                     checks every page comes back, tags verified; then the same from a
                     client that reads nothing (the coordinator's RSS must stay bounded)
  seed N             submits N jobs too large for the cluster (they stay pending)
"""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, sys.argv[4])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atoll_pb2 as pb  # noqa: E402
from ctl_py_client import Conn, connect  # noqa: E402

CASE, PORT, TOKEN = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read().strip()
ARGS = sys.argv[5:]


def spec(**kw):
    base = dict(name="attack", num_gpus=8, num_layers=4, hidden_size=128, num_attention_heads=4, seq_length=128,
                vocab_size=256, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, micro_batch_size=1,
                global_batch_size=8, train_iters=10, lr=1e-4, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8,
                seed=1, log_interval=1)
    base.update(kw)
    return pb.JobSpec(**base)


def expect_error(c, t, msg, code, text):
    c.send(t, msg)
    rt, p = c.recv()
    assert rt == pb.MSG_ERROR, (rt, p)
    e = pb.Error.FromString(p)
    assert e.code == code and text in e.message, (e.code, e.message)
    return e.message


def case_input():
    c = connect(PORT, TOKEN)
    bad = [
        (dict(micro_batch_size=1073741824, num_gpus=4), "--micro-batch-size: 1073741824 is above"),
        (dict(tensor_model_parallel_size=65536, pipeline_model_parallel_size=65536, num_gpus=4),
         "65536*65536 = 4294967296 is more than"),
        (dict(micro_batch_size=1 << 20, num_gpus=1 << 20, global_batch_size=0), "give --global-batch-size"),
        (dict(lr=float("inf")), "--lr: 'inf' is not a finite number"),
        (dict(lr=float("nan")), "--lr: 'nan' is not a finite number"),
        (dict(lr=-1.0), "--lr: -1 is below the smallest accepted value, 0"),
        (dict(adam_beta2=1.0), "--adam-beta2: 1 is not below 1"),
        (dict(num_layers=-5), "--num-layers: -5 is below"),
        (dict(rank_order="tp-dp-dp"), "repeated token 'dp'"),
    ]
    for kw, text in bad:
        m = expect_error(c, pb.MSG_SUBMIT, pb.SubmitRequest(spec=spec(**kw)), pb.ERR_INVALID, text)
        print("input: refused:", m)
    m = expect_error(c, pb.MSG_SUBMIT, pb.SubmitRequest(spec=spec(), request_id="no spaces allowed"),
                     pb.ERR_INVALID, "is not valid")
    print("input: refused:", m)
    # The connection is still good: a valid spec is accepted on it, and a retry is idempotent.
    # (Larger than the cluster, so it stays pending: running ranks are not this test's subject.)
    ok = spec(name="after-attack", num_gpus=1024, global_batch_size=1024)
    c.send(pb.MSG_SUBMIT, pb.SubmitRequest(spec=ok, request_id="attack-1"))
    t, p = c.recv()
    assert t == pb.MSG_SUBMIT_REPLY, (t, p)
    first = pb.SubmitReply.FromString(p)
    c.send(pb.MSG_SUBMIT, pb.SubmitRequest(spec=ok, request_id="attack-1"))
    t, p = c.recv()
    again = pb.SubmitReply.FromString(p)
    assert t == pb.MSG_SUBMIT_REPLY and again.job == first.job and again.existing and not first.existing
    print(f"input: a valid job is accepted afterwards (job {first.job}); its retry returns the same job")


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def read_all(s, limit=1.0):
    s.settimeout(limit)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def case_preauth():
    pid = int(ARGS[0])
    before = rss_kb(pid)
    # 1. Headers announcing 16 MiB frames, then part of the payload: refused at the header.
    # (The part stays within one pre-authentication read: bytes left unread when the
    # coordinator closes would make the kernel reset the connection, Error and all.)
    big = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=("127.0.0.2", 0))
        s.sendall(b"AT" + struct.pack(">HI", pb.MSG_AUTH, 16 << 20) + os.urandom(1000))
        big.append(s)
    too_large = capped = 0
    for s in big:
        out = read_all(s)
        too_large += b"frame too large: 16777216 bytes of payload, the limit is 1024" in out
        capped += b"connections from this address are already authenticating; at most 64" in out
        s.close()
    # Opened faster than refused, some meet the per-address cap of connections still authenticating.
    assert too_large + capped == 200 and too_large > 0, f"refused: {too_large} too large, {capped} capped of 200"
    # 2. Half-sent handshakes that stay open: what they can make the coordinator hold.
    held = []
    for i in range(60):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=("127.0.0.4", 0))
        s.sendall(b"AT" + struct.pack(">HI", pb.MSG_AUTH, 1000) + os.urandom(999))
        held.append(s)
    time.sleep(0.5)
    during = rss_kb(pid)
    for s in held:
        s.close()
    grew = during - before
    print(f"preauth: 200 oversized handshakes refused ({too_large} at their header, {capped} by the cap of 64 "
          f"authenticating per address); 60 half-sent ones held open; coordinator RSS {before} -> {during} KiB")
    assert grew < 32 * 1024, f"coordinator grew {grew} KiB before authentication"
    # 3. A burst of wrong MACs from one address: a few are checked, the rest refused outright.
    wrong = throttled = 0
    t0 = time.time()
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=("127.0.0.3", 0))
        c = Conn(s)
        t, p = c.recv()
        if t == pb.MSG_ERROR:
            assert "too many failed authentications" in pb.Error.FromString(p).message
            throttled += 1
        else:
            c.send(pb.MSG_AUTH, pb.Auth(client_nonce=os.urandom(32), mac=os.urandom(32), role=pb.ROLE_CLI))
            t, p = c.recv()
            assert t == pb.MSG_AUTH_RESULT and not pb.AuthResult.FromString(p).ok
            wrong += 1
        s.close()
    took = time.time() - t0
    print(f"preauth: 200 wrong-MAC tries in {took:.2f} s: {wrong} checked, {throttled} refused by the throttle")
    assert wrong <= 10 + int(took) + 1 and throttled >= 200 - wrong, (wrong, throttled)
    # Another address is not affected.
    c = connect(PORT, TOKEN, source=("127.0.0.5", 0))
    c.send(pb.MSG_NODES, pb.NodesRequest())
    t, p = c.recv()
    assert t == pb.MSG_NODES_REPLY
    print("preauth: a client from another address authenticates and is served meanwhile")


# ---- the relay ----

class Relay:
    """Relays one client connection to the coordinator, frame by frame, and does
    MODE to the first tagged frame of one direction."""

    def __init__(self, mode):
        self.mode = mode
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(1)
        self.port = self.ls.getsockname()[1]
        self.done = threading.Event()
        self.log = []

    @staticmethod
    def frames(src, untagged):
        n = 0
        read = Conn(src).read
        while True:
            h = read(8)
            if len(h) < 8:
                return
            t, ln = struct.unpack(">HI", h[2:])
            body = read(ln)
            tag = read(32) if n >= untagged else b""
            n += 1
            yield n - 1 - untagged, t, h, body, tag

    def pump(self, src, dst, untagged, active):
        try:
            for k, t, h, body, tag in self.frames(src, untagged):
                out = h + body + tag
                if active and k == 0:
                    if self.mode in ("alter", "alter-reply"):
                        b = bytearray(out)
                        b[8 if body else 3] ^= 0x01  # a payload bit, or the type when there is none
                        out = bytes(b)
                    elif self.mode == "drop":
                        self.log.append("dropped frame 0")
                        continue
                    elif self.mode == "replay":
                        dst.sendall(out)
                    elif self.mode == "inject":
                        dst.sendall(out)
                        m = pb.DrainRequest(name="n1", drain=True).SerializeToString()
                        out = b"AT" + struct.pack(">HI", pb.MSG_DRAIN, len(m)) + m + os.urandom(32)
                    self.log.append(f"{self.mode} at frame 0 ({t})")
                dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve(self):
        c, _ = self.ls.accept()
        u = socket.create_connection(("127.0.0.1", PORT), timeout=10)
        reply_side = self.mode == "alter-reply"
        a = threading.Thread(target=self.pump, args=(c, u, 1, not reply_side))   # client: Auth untagged
        b = threading.Thread(target=self.pump, args=(u, c, 2, reply_side))       # server: Challenge, AuthResult
        a.start()
        b.start()
        a.join()
        b.join()
        c.close()
        u.close()
        self.done.set()

    def start(self):
        threading.Thread(target=self.serve, daemon=True).start()
        return self


def node_drained(name="n1"):
    c = connect(PORT, TOKEN)
    c.send(pb.MSG_NODES, pb.NodesRequest(name=name))
    t, p = c.recv()
    assert t == pb.MSG_NODES_REPLY, t
    n = pb.NodesReply.FromString(p).nodes[0]
    c.sock.close()
    return n.drained


def case_mitm():
    mode = ARGS[0]
    r = Relay(mode).start()
    victim = connect(r.port, TOKEN, name="victim")
    # Two requests pipelined, so a dropped first one shows in the second's tag.
    victim.send(pb.MSG_NODES, pb.NodesRequest())
    victim.send(pb.MSG_NODES, pb.NodesRequest())
    answers = []
    try:
        while True:
            t, p = victim.recv()
            answers.append((t, p))
            if t == pb.MSG_ERROR or len(answers) == 3:
                break
    except AssertionError as e:  # the victim's own tag check
        answers.append(("client-detected", str(e)))
    except (OSError, ValueError, struct.error):
        answers.append(("closed", b""))
    r.done.wait(10)
    kinds = [a[0] for a in answers]
    print(f"mitm {mode}: relay did {r.log}; the client saw {kinds}")
    assert r.log, "the relay did nothing"
    if mode == "alter-reply":
        assert answers[0][0] == "client-detected" and "integrity" in answers[0][1], answers
    else:
        errors = [pb.Error.FromString(p) for t, p in answers if t == pb.MSG_ERROR]
        assert errors and errors[-1].code == pb.ERR_UNAUTHENTICATED and "fails its integrity check" in \
            errors[-1].message, answers
        replies = sum(t == pb.MSG_NODES_REPLY for t, _ in answers)
        # alter/drop: the first frame the coordinator sees is bad; inject/replay: the one after the first
        assert replies == (1 if mode in ("inject", "replay") else 0), answers
        print(f"mitm {mode}: coordinator refused: {errors[-1].message}")
    assert not node_drained(), "the node was drained"


def case_relay():
    mode, portfile = ARGS[0], ARGS[1]
    r = Relay(mode)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(r.port))
    os.rename(portfile + ".tmp", portfile)
    r.serve()
    print(f"relay {mode}: {r.log}")


def case_flood():
    n = int(ARGS[0])
    c = connect(PORT, TOKEN, name="flood")
    frames = b"".join(c.frame(pb.MSG_JOBS, pb.JobsRequest()) for _ in range(n))
    t0 = time.time()
    c.sock.sendall(frames)
    jobs = 0
    for i in range(n):
        t, p = c.recv()
        assert t == pb.MSG_JOBS_REPLY, t
        r = pb.JobsReply.FromString(p)
        assert len(r.jobs) <= 256
        jobs += len(r.jobs)
    print(f"flood: {n} pipelined JobsRequests answered in {time.time() - t0:.2f} s, pages of at most 256 "
          f"({jobs} jobs in all)")
    # A client that asks and never reads: its requests wait once 1 MiB of replies is queued.
    pid = int(ARGS[1])
    before = rss_kb(pid)
    d = connect(PORT, TOKEN, name="deaf")
    d.sock.sendall(b"".join(d.frame(pb.MSG_JOBS, pb.JobsRequest()) for _ in range(n)))
    time.sleep(1.5)
    during = rss_kb(pid)
    d.sock.close()
    print(f"flood: {n} requests from a client that reads nothing: coordinator RSS {before} -> {during} KiB")
    assert during - before < 48 * 1024, f"the coordinator buffered {during - before} KiB for a client not reading"


def case_seed():
    n = int(ARGS[0])
    c = connect(PORT, TOKEN, name="seed")
    s = spec(num_gpus=4096, global_batch_size=4096, name="pending")
    c.sock.sendall(b"".join(c.frame(pb.MSG_SUBMIT, pb.SubmitRequest(spec=s)) for _ in range(n)))
    for i in range(n):
        t, p = c.recv()
        assert t == pb.MSG_SUBMIT_REPLY, (t, p)
    print(f"seed: {n} jobs pending")


{"input": case_input, "preauth": case_preauth, "mitm": case_mitm, "relay": case_relay, "flood": case_flood,
 "seed": case_seed}[CASE]()
