"""A process without the job secret tries to join a running job through the
coordinator: as a rank with a wrong secret, as a rank proving the cluster token
instead of the job secret, with the CLI's token-authenticated connection, and as a
rank of another job. Every attempt must be refused; exit status 0 when all were.
usage: jobs_intruder.py PORT TOKEN_FILE PROTO_PY_DIR JOB"""
import hashlib, hmac, os, socket, struct, sys

port, token_file, pydir, job = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, pydir)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atoll_pb2 as pb  # noqa: E402
from ctl_py_client import H, Conn  # noqa: E402  (frames and their tags, from proto/README.md)

token = open(token_file).read().strip().encode()
T = pb.MsgType


def send(c, t, m):
    c.send(t, m)


def recv(c):
    try:
        return c.recv()
    except AssertionError:  # closed
        return None, None


def job_secret(j, e):
    return hmac.new(token, b"atoll-v1 job" + struct.pack(">QI", j, e), hashlib.sha256).hexdigest().encode()


def connect(key, role, j=0, e=0):
    c = Conn(socket.create_connection(("127.0.0.1", port), timeout=5))
    t, p = c.recv()
    assert t == T.Value("MSG_CHALLENGE")
    nonce = pb.Challenge.FromString(p).nonce
    cn = os.urandom(32)
    mac = H(key, b"atoll-v1 client" + nonce + cn)
    c.send(T.Value("MSG_AUTH"), pb.Auth(client_nonce=cn, mac=mac, role=role, name="intruder", job=j, epoch=e))
    c.tx = H(key, b"atoll-v1 client->server" + nonce + cn)
    t, p = c.recv()
    r = pb.AuthResult.FromString(p)
    if r.ok:
        c.rx = H(key, b"atoll-v1 server->client" + nonce + cn)
    return c, r


failures = []


def expect(cond, what):
    print(("ok: " if cond else "FAILED: ") + what)
    if not cond:
        failures.append(what)


# 1. a rank of this job with a made-up secret
s, r = connect(os.urandom(32).hex().encode(), pb.ROLE_RANK, job, 0)
expect(not r.ok and "job secret" in r.message, "a wrong job secret is refused: %s" % r.message)
s.sock.close()
# 2. claiming a rank with the cluster token itself (a rank must prove the derived secret)
s, r = connect(token, pb.ROLE_RANK, job, 0)
expect(not r.ok, "the cluster token is not a job secret")
s.sock.close()
# 3. the CLI's connection (cluster token) may not touch a job's keys
s, r = connect(token, pb.ROLE_CLI)
assert r.ok
for t, m in (("MSG_KV_SET", pb.KvSet(job=job, epoch=0, key="atoll/host/addr/0", value=b"6.6.6.6:1")),
             ("MSG_KV_GET", pb.KvGet(job=job, epoch=0, key="atoll/host/addr/0"))):
    send(s, T.Value(t), m)
    rt, p = recv(s)
    e = pb.Error.FromString(p) if rt == T.Value("MSG_ERROR") else None
    expect(e is not None and e.code == pb.ERR_UNAUTHENTICATED, "%s from a CLI connection is refused: %s" %
           (t, e.message if e else "answered"))
s.sock.close()
# 4. a genuine rank of another job cannot reach this job's keys
s, r = connect(job_secret(job + 1000, 0), pb.ROLE_RANK, job + 1000, 0)
assert r.ok, r.message
send(s, T.Value("MSG_KV_SET"), pb.KvSet(job=job, epoch=0, key="atoll/host/addr/1", value=b"6.6.6.6:1"))
rt, p = recv(s)
e = pb.Error.FromString(p) if rt == T.Value("MSG_ERROR") else None
expect(e is not None and "not of job %d" % job in e.message, "another job's rank cannot write this job's keys: %s" %
       (e.message if e else "answered"))
send(s, T.Value("MSG_JOBS"), pb.JobsRequest())
rt, p = recv(s)
expect(rt == T.Value("MSG_ERROR"), "a rank connection cannot list jobs")
# a scope's store is bounded: 17 values of 1 MiB do not all fit
refused = False
for i in range(17):
    send(s, T.Value("MSG_KV_SET"), pb.KvSet(job=job + 1000, epoch=0, key="fill/%d" % i, value=b"x" * (1 << 20)))
    rt, p = recv(s)
    if rt == T.Value("MSG_ERROR"):
        refused = "refused" in pb.Error.FromString(p).message
        break
expect(refused, "a job's rendezvous memory is bounded (16 MiB)")
s.sock.close()
sys.exit(1 if failures else 0)
