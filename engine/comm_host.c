/* comm_host.c: the host transport: TCP between every pair of ranks, ring
 * collectives on top.
 *
 * Links. At world init every rank listens on an ephemeral port, publishes
 * "ip:port" in the store, connects to every lower rank and accepts every higher
 * one: a full mesh, one socket per pair, shared by all groups. Each message
 * carries (ctx, tag, bytes); ctx names the group, tag the operation.
 *
 * Progress. One thread per process reads every socket as data arrives. If a
 * matching receive is already posted it reads straight into the caller's
 * buffer; otherwise it buffers the message (unbounded) until a receive asks for
 * it. Since every rank always drains its sockets, a blocking send always
 * finishes, so two ranks sending to each other at once cannot deadlock and
 * sends are "buffered" in the MPI sense: they never wait for the receive call.
 *
 * Collectives. All-reduce is a ring reduce-scatter then a ring all-gather over
 * P segments (sizes differ by at most one element, so any n works), each step
 * split into chunks: receives for a whole step are posted first, then chunk k is
 * sent, awaited and reduced while chunk k+1 is still arriving. Every segment is
 * summed in one fixed order by one rank and then copied, so all ranks end with
 * bit-identical results. Broadcast is a chunked chain from the root.
 */
#include "errf.h"
#include "comm.h"

#include "auth.h"
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HOST_MAGIC 0x41544c4cu /* "ATLL" */
#define CHUNK_BYTES (1u << 20)
#define COLL_TAG 0x80000000u

typedef struct {
    uint32_t magic, ctx, tag, pad;
    uint64_t bytes;
} wire_hdr;

/* A message that arrived before its receive was posted. */
typedef struct msg {
    uint32_t ctx, tag;
    double t_first, t_done; /* header arrived, payload complete */
    size_t bytes;
    unsigned char *data;
    int complete;
    struct msg *next;
} msg;

enum { REQ_POSTED, REQ_RECEIVING, REQ_DONE, REQ_FAILED };

typedef struct req {
    uint32_t ctx, tag;
    void *buf;
    size_t bytes;
    int peer; /* world rank */
    int state;
    msg *m; /* matched an already-arrived message */
    double t_first, t_done; /* header arrived, payload complete */
    char why[160];
    struct req *next;
} req;

typedef struct {
    int fd;
    pthread_mutex_t send_mu;
    /* guarded by host_world.mu */
    msg *unexp_head, *unexp_tail;
    req *posted_head, *posted_tail;
    int closed;
    char why[160];
    /* owned by the progress thread */
    wire_hdr hdr;
    size_t hdr_got;
    unsigned char *dst;
    size_t need, got;
    req *cur_req;
    msg *cur_msg;
    int in_payload;
} peer;

typedef struct {
    peer *peers; /* by world rank; own entry unused */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t progress;
    int wake[2];
    int started;
} host_world;

typedef struct {
    float *tmp;
    size_t cap;
} host_group;

/* ---------------- progress thread ---------------- */

static void peer_closed(host_world *h, int rank, const char *why)
{
    peer *p = &h->peers[rank];
    pthread_mutex_lock(&h->mu);
    p->closed = 1;
    snprintf(p->why, sizeof p->why, "%s", why);
    for (req *r = p->posted_head; r; r = r->next) {
        r->state = REQ_FAILED;
        snprintf(r->why, sizeof r->why, "%s", why);
    }
    p->posted_head = p->posted_tail = NULL;
    if (p->cur_req && p->cur_req->state == REQ_RECEIVING) {
        p->cur_req->state = REQ_FAILED;
        snprintf(p->cur_req->why, sizeof p->cur_req->why, "%s", why);
    }
    if (p->cur_msg && !p->cur_msg->complete) p->cur_msg->complete = -1;
    p->cur_req = NULL;
    p->cur_msg = NULL;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* A header arrived: find where its payload goes. The first posted receive with
 * the same (ctx, tag) takes it, in posting order; with none, it is buffered. */
static int route_payload(host_world *h, peer *p)
{
    pthread_mutex_lock(&h->mu);
    req *r = p->posted_head, *prev = NULL;
    while (r && !(r->ctx == p->hdr.ctx && r->tag == p->hdr.tag)) {
        prev = r;
        r = r->next;
    }
    if (r) {
        if (prev) prev->next = r->next;
        else p->posted_head = r->next;
        if (p->posted_tail == r) p->posted_tail = prev;
        r->state = REQ_RECEIVING;
    }
    if (r && r->bytes == p->hdr.bytes) {
        r->t_first = atoll_mono_s();
        p->cur_req = r;
        p->dst = r->buf;
    } else {
        /* Unexpected; or a size mismatch, which the receive reports once the
         * whole message has been read off the link. */
        msg *m = calloc(1, sizeof *m);
        unsigned char *data = m ? malloc(p->hdr.bytes ? p->hdr.bytes : 1) : NULL;
        if (!data) {
            free(m);
            if (r) { /* put it back: peer_closed will fail it */
                r->state = REQ_POSTED;
                r->next = p->posted_head;
                p->posted_head = r;
                if (!p->posted_tail) p->posted_tail = r;
            }
            pthread_mutex_unlock(&h->mu);
            return -1;
        }
        m->ctx = p->hdr.ctx;
        m->tag = p->hdr.tag;
        m->bytes = p->hdr.bytes;
        m->t_first = atoll_mono_s();
        m->data = data;
        if (r) {
            r->m = m;
        } else {
            if (p->unexp_tail) p->unexp_tail->next = m;
            else p->unexp_head = m;
            p->unexp_tail = m;
        }
        p->cur_msg = m;
        p->dst = m->data;
    }
    p->need = p->hdr.bytes;
    p->got = 0;
    p->in_payload = 1;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static void payload_done(host_world *h, peer *p)
{
    pthread_mutex_lock(&h->mu);
    double t = atoll_mono_s();
    if (p->cur_req) {
        p->cur_req->t_done = t;
        p->cur_req->state = REQ_DONE;
    }
    if (p->cur_msg) {
        p->cur_msg->t_done = t;
        p->cur_msg->complete = 1;
    }
    p->cur_req = NULL;
    p->cur_msg = NULL;
    p->in_payload = 0;
    p->hdr_got = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Reads what is available from one peer. Returns -1 once the link is gone. */
static int pump(host_world *h, int rank)
{
    peer *p = &h->peers[rank];
    for (;;) {
        ssize_t r;
        if (!p->in_payload) {
            r = recv(p->fd, (char *)&p->hdr + p->hdr_got, sizeof p->hdr - p->hdr_got, MSG_DONTWAIT);
            if (r > 0) {
                p->hdr_got += (size_t)r;
                if (p->hdr_got < sizeof p->hdr) continue;
                char why[160];
                if (p->hdr.magic != HOST_MAGIC) {
                    snprintf(why, sizeof why, "rank %d sent a corrupt message header", rank);
                    peer_closed(h, rank, why);
                    return -1;
                }
                if (route_payload(h, p) != 0) {
                    snprintf(why, sizeof why, "out of memory buffering %llu bytes from rank %d",
                             (unsigned long long)p->hdr.bytes, rank);
                    peer_closed(h, rank, why);
                    return -1;
                }
                if (p->need == 0) payload_done(h, p);
                continue;
            }
        } else {
            r = recv(p->fd, p->dst + p->got, p->need - p->got, MSG_DONTWAIT);
            if (r > 0) {
                p->got += (size_t)r;
                if (p->got == p->need) payload_done(h, p);
                continue;
            }
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (r < 0 && errno == EINTR) continue;
        char why[160];
        snprintf(why, sizeof why, "rank %d closed its connection (%s)", rank,
                 r == 0 ? "exited or crashed" : strerror(errno));
        peer_closed(h, rank, why);
        return -1;
    }
}

static void *progress_main(void *arg)
{
    comm_world *w = arg;
    host_world *h = w->impl;
    struct pollfd *pfd = calloc((size_t)w->size + 1, sizeof *pfd);
    int *who = calloc((size_t)w->size + 1, sizeof *who);
    for (;;) {
        int n = 0;
        pfd[n].fd = h->wake[0];
        pfd[n].events = POLLIN;
        who[n++] = -1;
        for (int i = 0; i < w->size; i++) {
            if (i == w->rank || h->peers[i].closed) continue;
            pfd[n].fd = h->peers[i].fd;
            pfd[n].events = POLLIN;
            who[n++] = i;
        }
        int pr = poll(pfd, (nfds_t)n, -1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) break;
        if (pfd[0].revents) break; /* shutting down */
        for (int k = 1; k < n; k++)
            if (pfd[k].revents) pump(h, who[k]);
    }
    free(pfd);
    free(who);
    return NULL;
}

/* ---------------- receive requests ---------------- */

static req *post_recv(comm *c, int wrank, void *buf, size_t bytes, uint32_t tag)
{
    host_world *h = c->world->impl;
    peer *p = &h->peers[wrank];
    req *r = calloc(1, sizeof *r);
    r->ctx = c->ctx;
    r->tag = tag;
    r->buf = buf;
    r->bytes = bytes;
    r->peer = wrank;
    pthread_mutex_lock(&h->mu);
    msg *m = p->unexp_head, *prev = NULL;
    while (m && !(m->ctx == r->ctx && m->tag == tag)) {
        prev = m;
        m = m->next;
    }
    if (m) {
        if (prev) prev->next = m->next;
        else p->unexp_head = m->next;
        if (p->unexp_tail == m) p->unexp_tail = prev;
        r->m = m;
        r->state = REQ_RECEIVING;
    } else if (p->closed) {
        r->state = REQ_FAILED;
        snprintf(r->why, sizeof r->why, "%s", p->why);
    } else {
        r->state = REQ_POSTED;
        if (p->posted_tail) p->posted_tail->next = r;
        else p->posted_head = r;
        p->posted_tail = r;
    }
    pthread_mutex_unlock(&h->mu);
    return r;
}

static const char *op_label(uint32_t tag) { return tag & COLL_TAG ? "collective" : "recv"; }

/* Waits for r and frees it. Returns 0 or -1 with the world error set. When
 * `when` is given, it gets when the message's first byte arrived and when it was
 * complete. */
static int wait_recv_timed(comm *c, req *r, double when[2])
{
    comm_world *w = c->world;
    host_world *h = w->impl;
    double deadline = atoll_mono_s() + w->timeout_ms / 1e3;
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (r->m && r->m->complete) break;
        if (r->state == REQ_DONE || r->state == REQ_FAILED) break;
        if (r->m && !r->m->complete && h->peers[r->peer].closed) break;
        /* wake at the deadline or within a second, whichever is first */
        double left = deadline - atoll_mono_s();
        if (left > 1) left = 1;
        if (left < 0.001) left = 0.001;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long long ns = ts.tv_nsec + (long long)(left * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        if (atoll_mono_s() > deadline && r->state == REQ_POSTED) {
            peer *p = &h->peers[r->peer];
            req **pp = &p->posted_head, *prev = NULL;
            while (*pp && *pp != r) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            if (*pp) *pp = r->next;
            if (p->posted_tail == r) p->posted_tail = prev;
            r->state = REQ_FAILED;
            snprintf(r->why, sizeof r->why, "no message from rank %d within %d ms", r->peer,
                     w->timeout_ms);
            break;
        }
    }
    if (r->m) {
        if (r->m->complete != 1) {
            rc = comm_fail(w, "comm: %s on group '%s' from rank %d: %s", op_label(r->tag),
                           c->name, r->peer, h->peers[r->peer].why);
        } else if (r->m->bytes != r->bytes) {
            rc = comm_fail(w, "comm: %s on group '%s': rank %d sent %zu bytes, the receive expects %zu "
                           "(mismatched calls)", op_label(r->tag), c->name, r->peer, r->m->bytes, r->bytes);
        } else {
            memcpy(r->buf, r->m->data, r->bytes);
        }
        r->t_first = r->m->t_first;
        r->t_done = r->m->t_done;
        free(r->m->data);
        free(r->m);
    } else if (r->state == REQ_FAILED) {
        rc = comm_fail(w, "comm: %s on group '%s' from rank %d: %s", op_label(r->tag), c->name,
                       r->peer, r->why);
    }
    if (when) {
        when[0] = r->t_first;
        when[1] = r->t_done;
    }
    pthread_mutex_unlock(&h->mu);
    free(r);
    return rc;
}

static int wait_recv(comm *c, req *r) { return wait_recv_timed(c, r, NULL); }

static int send_msg(comm *c, int wrank, const void *buf, size_t bytes, uint32_t tag)
{
    host_world *h = c->world->impl;
    peer *p = &h->peers[wrank];
    wire_hdr hdr = {HOST_MAGIC, c->ctx, tag, 0, bytes};
    struct iovec iov[2] = {{&hdr, sizeof hdr}, {(void *)buf, bytes}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    int rc = 0;
    pthread_mutex_lock(&p->send_mu);
    size_t left = sizeof hdr + bytes;
    while (left) {
        ssize_t s = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
        if (s < 0 && errno == EINTR) continue;
        if (s <= 0) {
            rc = comm_fail(c->world, "comm: send on group '%s' to rank %d failed: %s (peer exited?)",
                           c->name, wrank, s == 0 ? "connection closed" : strerror(errno));
            break;
        }
        left -= (size_t)s;
        while (s > 0 && mh.msg_iovlen) {
            size_t take = (size_t)s < mh.msg_iov->iov_len ? (size_t)s : mh.msg_iov->iov_len;
            mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + take;
            mh.msg_iov->iov_len -= take;
            s -= (ssize_t)take;
            if (mh.msg_iov->iov_len == 0) {
                mh.msg_iov++;
                mh.msg_iovlen--;
            }
        }
    }
    pthread_mutex_unlock(&p->send_mu);
    return rc;
}

/* ---------------- world setup ---------------- */

/* The address peers should dial: ATOLL_HOST_ADDR, else the local address the
 * kernel would use to reach the store's host (MASTER_ADDR). */
static void local_addr(char *out, size_t len)
{
    const char *env = getenv("ATOLL_HOST_ADDR");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    snprintf(out, len, "127.0.0.1");
    const char *master = getenv("MASTER_ADDR");
    if (!master || !*master) return;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(master, "9", &hints, &res) != 0) return;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &ml) == 0)
        inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)len);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
}

static int setup_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int full_read(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    while (n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)((deadline - atoll_mono_s()) * 1e3);
        if (left <= 0 || poll(&pfd, 1, left) <= 0) return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Rank-to-rank links prove the job secret both ways before any traffic:
 *   connector -> acceptor  {magic, rank, cn}                    (cn, sn: 32 random bytes)
 *   acceptor -> connector  {sn, HMAC(secret, "atoll-v1 peer accept A<-C", cn, sn)}
 *   connector -> acceptor  {HMAC(secret, "atoll-v1 peer connect C->A", sn, cn)}
 * So no process without the secret can take a rank's place or be sent its traffic. */
typedef struct {
    uint32_t magic, rank;
    uint8_t nonce[AUTH_NONCE_LEN];
} hello_msg;

static void peer_label(char *buf, size_t len, const char *what, int from, int to)
{
    snprintf(buf, len, "atoll-v1 peer %s %d %d", what, from, to);
}

#define PEER_HANDSHAKE_S 5.0

static int connect_mesh(comm_world *w, int lfd, char *err, size_t errlen)
{
    host_world *h = w->impl;
    const auth_token *secret = &store_client_auth(w->store)->secret;
    double deadline = atoll_mono_s() + w->timeout_ms / 1e3;
    char label[64];
    for (int j = 0; j < w->rank; j++) {
        char key[128];
        snprintf(key, sizeof key, "%s/host/addr/%d", w->prefix, j);
        void *val = NULL;
        size_t len = 0;
        int left = (int)((deadline - atoll_mono_s()) * 1e3);
        if (store_wait(w->store, key, left > 0 ? left : 1, &val, &len) != STORE_OK) {
            snprintf(err, errlen, "comm: rank %d: %s", w->rank, store_error(w->store));
            return -1;
        }
        char *colon = strrchr(val, ':');
        if (!colon) {
            snprintf(err, errlen, "comm: store key %s holds '%s', not host:port", key, (char *)val);
            free(val);
            return -1;
        }
        *colon = 0;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
        int ok = inet_pton(AF_INET, val, &sa.sin_addr) == 1;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        hello_msg hello = {HOST_MAGIC, (uint32_t)w->rank, {0}};
        auth_random(hello.nonce, sizeof hello.nonce);
        if (!ok || fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
            snprintf(err, errlen, "comm: rank %d cannot connect to rank %d at %s:%s: %s", w->rank, j,
                     (char *)val, colon + 1, strerror(errno));
            if (fd >= 0) close(fd);
            free(val);
            return -1;
        }
        uint8_t reply[AUTH_NONCE_LEN + AUTH_MAC_LEN], want[AUTH_MAC_LEN], mine[AUTH_MAC_LEN];
        double hs = atoll_mono_s() + PEER_HANDSHAKE_S;
        int got = full_read(fd, reply, sizeof reply, hs < deadline ? hs : deadline) == 0;
        peer_label(label, sizeof label, "accept", j, w->rank);
        if (got) auth_mac(secret, label, hello.nonce, reply, want);
        if (!got || !auth_equal(want, reply + AUTH_NONCE_LEN, AUTH_MAC_LEN)) {
            snprintf(err, errlen, "comm: rank %d: the process at %s:%s did not prove the job secret of rank %d",
                     w->rank, (char *)val, colon + 1, j);
            close(fd);
            free(val);
            return -1;
        }
        free(val);
        peer_label(label, sizeof label, "connect", w->rank, j);
        auth_mac(secret, label, reply, hello.nonce, mine);
        if (send(fd, mine, sizeof mine, MSG_NOSIGNAL) != (ssize_t)sizeof mine) {
            snprintf(err, errlen, "comm: rank %d: rank %d dropped the link during its handshake", w->rank, j);
            close(fd);
            return -1;
        }
        h->peers[j].fd = setup_socket(fd);
    }
    int need = w->size - w->rank - 1, refused = 0;
    while (need > 0) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int left = (int)((deadline - atoll_mono_s()) * 1e3);
        int fd = -1;
        if (left > 0 && poll(&pfd, 1, left) == 1) fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "comm: rank %d: ranks above it did not all connect within %d ms%s", w->rank,
                     w->timeout_ms, refused ? " (connections without the job secret were refused)" : "");
            return -1;
        }
        double hs = atoll_mono_s() + PEER_HANDSHAKE_S;
        if (hs > deadline) hs = deadline;
        hello_msg hello;
        uint8_t reply[AUTH_NONCE_LEN + AUTH_MAC_LEN], proof[AUTH_MAC_LEN], want[AUTH_MAC_LEN];
        int ok = full_read(fd, &hello, sizeof hello, hs) == 0 && hello.magic == HOST_MAGIC &&
                 hello.rank > (uint32_t)w->rank && hello.rank < (uint32_t)w->size && h->peers[hello.rank].fd < 0;
        if (ok) {
            auth_random(reply, AUTH_NONCE_LEN);
            peer_label(label, sizeof label, "accept", w->rank, (int)hello.rank);
            auth_mac(secret, label, hello.nonce, reply, reply + AUTH_NONCE_LEN);
            ok = send(fd, reply, sizeof reply, MSG_NOSIGNAL) == (ssize_t)sizeof reply &&
                 full_read(fd, proof, sizeof proof, hs) == 0;
        }
        if (ok) {
            peer_label(label, sizeof label, "connect", (int)hello.rank, w->rank);
            auth_mac(secret, label, reply, hello.nonce, want);
            ok = auth_equal(want, proof, AUTH_MAC_LEN);
        }
        if (!ok) { /* not one of ours: drop it and keep waiting for the real rank */
            fprintf(stderr, "comm: rank %d: refused a connection that did not prove the job secret\n", w->rank);
            refused++;
            close(fd);
            continue;
        }
        h->peers[hello.rank].fd = setup_socket(fd);
        need--;
    }
    return 0;
}

static void host_world_free(comm_world *w);

static int host_world_init(comm_world *w, char *err, size_t errlen)
{
    if ((w->flags & COMM_DEVICE_BUFFERS) && !comm_world_can_stage()) {
        /* comm.c stages device buffers through host memory with the engine's copies */
        snprintf(err, errlen, "comm: the host backend got device buffers (COMM_DEVICE_BUFFERS) but no "
                 "device copies to stage them with (comm_set_device_copy)");
        return -1;
    }
    host_world *h = calloc(1, sizeof *h);
    w->impl = h;
    h->peers = calloc((size_t)w->size, sizeof *h->peers);
    h->wake[0] = h->wake[1] = -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    for (int i = 0; i < w->size; i++) {
        h->peers[i].fd = -1;
        pthread_mutex_init(&h->peers[i].send_mu, NULL);
    }
    if (w->size == 1) return 0;

    char addr[64];
    local_addr(addr, sizeof addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t sl = sizeof sa;
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 || lfd < 0 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 1024) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
        snprintf(err, errlen, "comm: rank %d cannot listen on %s (set ATOLL_HOST_ADDR to this "
                 "host's IPv4 address): %s", w->rank, addr, strerror(errno));
        if (lfd >= 0) close(lfd);
        host_world_free(w);
        return -1;
    }
    char key[128], val[96];
    snprintf(key, sizeof key, "%s/host/addr/%d", w->prefix, w->rank);
    int vl = snprintf(val, sizeof val, "%s:%d", addr, ntohs(sa.sin_port));
    if (store_set(w->store, key, val, (size_t)vl) != STORE_OK) {
        snprintf(err, errlen, "comm: rank %d: %s", w->rank, store_error(w->store));
        close(lfd);
        host_world_free(w);
        return -1;
    }
    int rc = connect_mesh(w, lfd, err, errlen);
    close(lfd);
    if (rc != 0 || pipe2(h->wake, O_CLOEXEC) != 0 ||
        pthread_create(&h->progress, NULL, progress_main, w) != 0) {
        if (rc == 0) snprintf(err, errlen, "comm: cannot start the progress thread");
        host_world_free(w);
        return -1;
    }
    h->started = 1;
    return 0;
}

static void host_world_free(comm_world *w)
{
    host_world *h = w->impl;
    if (!h) return;
    if (h->started) {
        char b = 0;
        if (write(h->wake[1], &b, 1) != 1) { /* the thread also stops when poll fails */ }
        pthread_join(h->progress, NULL);
    }
    for (int i = 0; i < w->size; i++) {
        peer *p = &h->peers[i];
        if (p->fd >= 0) close(p->fd);
        for (msg *m = p->unexp_head, *n; m; m = n) {
            n = m->next;
            free(m->data);
            free(m);
        }
        pthread_mutex_destroy(&p->send_mu);
    }
    if (h->wake[0] >= 0) close(h->wake[0]);
    if (h->wake[1] >= 0) close(h->wake[1]);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->peers);
    free(h);
    w->impl = NULL;
}

static int host_group_init(comm *c)
{
    c->impl = calloc(1, sizeof(host_group));
    return 0;
}

static void host_group_free(comm *c)
{
    host_group *g = c->impl;
    free(g->tmp);
    free(g);
    c->impl = NULL;
}

static float *scratch(comm *c, size_t n)
{
    host_group *g = c->impl;
    if (g->cap < n) {
        free(g->tmp);
        g->tmp = malloc(n * sizeof(float));
        g->cap = n;
    }
    return g->tmp;
}

/* ---------------- ring steps ---------------- */

static size_t seg_lo(size_t n, int parts, int i) { return n * (size_t)i / (size_t)parts; }
#define CHUNK_FLOATS (CHUNK_BYTES / sizeof(float))
static size_t nchunks(size_t n) { return (n + CHUNK_FLOATS - 1) / CHUNK_FLOATS; }

/* One ring step: send src[0..ns) to the right, receive rn floats from the left
 * into dst; if `acc` is non-NULL, dst[i] += acc[i] chunk by chunk as they land
 * (dst then holds acc + received). */
static int ring_step(comm *c, const float *src, size_t ns, float *dst, size_t rn, const float *acc,
                     float *rtmp, uint32_t tag)
{
    int right = c->ranks[(c->pos + 1) % c->size];
    int left = c->ranks[(c->pos - 1 + c->size) % c->size];
    size_t kr = nchunks(rn), ks = nchunks(ns), kmax = kr > ks ? kr : ks;
    float *land = acc ? rtmp : dst;
    req **rq = malloc(sizeof(req *) * (kr ? kr : 1));
    for (size_t k = 0; k < kr; k++) {
        size_t lo = k * CHUNK_FLOATS, len = rn - lo < CHUNK_FLOATS ? rn - lo : CHUNK_FLOATS;
        rq[k] = post_recv(c, left, land + lo, len * sizeof(float), tag);
    }
    int rc = 0;
    for (size_t k = 0; k < kmax; k++) {
        if (k < ks && rc == 0) {
            size_t lo = k * CHUNK_FLOATS, len = ns - lo < CHUNK_FLOATS ? ns - lo : CHUNK_FLOATS;
            rc = send_msg(c, right, src + lo, len * sizeof(float), tag);
        }
        if (k < kr) {
            int r = wait_recv(c, rq[k]); /* always wait: the request must be reclaimed */
            if (rc == 0) rc = r;
            if (rc == 0 && acc) {
                size_t lo = k * CHUNK_FLOATS, len = rn - lo < CHUNK_FLOATS ? rn - lo : CHUNK_FLOATS;
                for (size_t i = lo; i < lo + len; i++) dst[i] = rtmp[i] + acc[i];
            }
        }
    }
    free(rq);
    return rc;
}

static uint32_t coll_tag(comm *c) { return COLL_TAG | (c->seq++ & 0x7fffffffu); }

static void scale(float *buf, size_t n, float s)
{
    for (size_t i = 0; i < n; i++) buf[i] *= s;
}

/* The all-reduce's first half, in place: the ring reduce-scatter after which
 * position r holds segment (r+1)%P of the sum (its other segments partial sums). */
static int ring_reduce_scatter(comm *c, float *buf, size_t n, uint32_t tag)
{
    int P = c->size, r = c->pos;
    float *tmp = scratch(c, n / (size_t)P + 1);
    for (int s = 0; s < P - 1; s++) {
        int ss = (r - s + P) % P, rs = (r - s - 1 + P) % P;
        size_t slo = seg_lo(n, P, ss), rlo = seg_lo(n, P, rs);
        if (ring_step(c, buf + slo, seg_lo(n, P, ss + 1) - slo, buf + rlo,
                      seg_lo(n, P, rs + 1) - rlo, buf + rlo, tmp, tag) != 0)
            return -1;
    }
    return 0;
}

static int host_allreduce(comm *c, float *buf, size_t n, comm_op op)
{
    int P = c->size, r = c->pos;
    if (P > 1) {
        uint32_t tag = coll_tag(c);
        if (ring_reduce_scatter(c, buf, n, tag)) return -1;
        /* all-gather the reduced segments */
        for (int s = 0; s < P - 1; s++) {
            int ss = (r + 1 - s + P) % P, rs = (r - s + P) % P;
            size_t slo = seg_lo(n, P, ss), rlo = seg_lo(n, P, rs);
            if (ring_step(c, buf + slo, seg_lo(n, P, ss + 1) - slo, buf + rlo,
                          seg_lo(n, P, rs + 1) - rlo, NULL, NULL, tag) != 0)
                return -1;
        }
    }
    if (op == COMM_AVG) scale(buf, n, 1.0f / (float)P);
    return 0;
}

/* The all-reduce's ring reduce-scatter, then each position sends the segment it
 * completed to the root (the root's other segments hold partial sums until then). */
static int host_reduce(comm *c, float *buf, size_t n, comm_op op, int root)
{
    int P = c->size, r = c->pos;
    if (P > 1) {
        uint32_t tag = coll_tag(c);
        if (ring_reduce_scatter(c, buf, n, tag)) return -1;
        /* position q now holds segment (q+1)%P complete */
        int rc = 0;
        if (r != root) {
            int seg = (r + 1) % P;
            size_t lo = seg_lo(n, P, seg), len = seg_lo(n, P, seg + 1) - lo;
            for (size_t k = 0; k < len && rc == 0; k += CHUNK_FLOATS)
                rc = send_msg(c, c->ranks[root], buf + lo + k,
                              (len - k < CHUNK_FLOATS ? len - k : CHUNK_FLOATS) * sizeof(float), tag);
        } else {
            size_t nreq = 0, cap = 0;
            for (int q = 0; q < P; q++)
                if (q != root) {
                    int seg = (q + 1) % P;
                    cap += nchunks(seg_lo(n, P, seg + 1) - seg_lo(n, P, seg));
                }
            req **rq = malloc(sizeof(req *) * (cap ? cap : 1));
            if (!rq) return comm_fail(c->world, "comm: reduce on '%s': out of memory", c->name);
            for (int q = 0; q < P; q++) {
                if (q == root) continue;
                int seg = (q + 1) % P;
                size_t lo = seg_lo(n, P, seg), len = seg_lo(n, P, seg + 1) - lo;
                for (size_t k = 0; k < len; k += CHUNK_FLOATS)
                    rq[nreq++] = post_recv(c, c->ranks[q], buf + lo + k,
                                           (len - k < CHUNK_FLOATS ? len - k : CHUNK_FLOATS) * sizeof(float), tag);
            }
            for (size_t i = 0; i < nreq; i++) {
                int e = wait_recv(c, rq[i]); /* always wait: every request must be reclaimed */
                if (rc == 0) rc = e;
            }
            free(rq);
        }
        if (rc) return -1;
    }
    if (op == COMM_AVG && r == root) scale(buf, n, 1.0f / (float)P);
    return 0;
}

static int host_reduce_scatter(comm *c, const float *in, float *out, size_t n, comm_op op)
{
    int P = c->size, r = c->pos;
    if (P == 1) {
        memcpy(out, in, n * sizeof(float));
    } else {
        uint32_t tag = coll_tag(c);
        float *tmp = scratch(c, n);
        /* step s sends the partial sum of segment r-s-1 and builds r-s-2, so the
         * last step (s = P-2) leaves segment r complete in out */
        for (int s = 0; s < P - 1; s++) {
            int ss = (r - s - 1 + 2 * P) % P, rs = (r - s - 2 + 2 * P) % P;
            const float *src = s == 0 ? in + (size_t)ss * n : out;
            if (ring_step(c, src, n, out, n, in + (size_t)rs * n, tmp, tag) != 0) return -1;
        }
    }
    if (op == COMM_AVG) scale(out, n, 1.0f / (float)P);
    return 0;
}

static int host_allgather(comm *c, const float *in, float *out, size_t n)
{
    int P = c->size, r = c->pos;
    if (in != out + (size_t)r * n) memmove(out + (size_t)r * n, in, n * sizeof(float));
    if (P == 1) return 0;
    uint32_t tag = coll_tag(c);
    for (int s = 0; s < P - 1; s++) {
        int ss = (r - s + P) % P, rs = (r - s - 1 + P) % P;
        if (ring_step(c, out + (size_t)ss * n, n, out + (size_t)rs * n, n, NULL, NULL, tag) != 0)
            return -1;
    }
    return 0;
}

static int host_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    int P = c->size, rel = (c->pos - root + P) % P;
    int right = c->ranks[(c->pos + 1) % P], left = c->ranks[(c->pos - 1 + P) % P];
    uint32_t tag = coll_tag(c);
    size_t k = (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    unsigned char *b = buf;
    req **rq = calloc(k, sizeof(req *));
    for (size_t i = 0; i < k && rel != 0; i++) {
        size_t lo = i * CHUNK_BYTES, len = bytes - lo < CHUNK_BYTES ? bytes - lo : CHUNK_BYTES;
        rq[i] = post_recv(c, left, b + lo, len, tag);
    }
    int rc = 0;
    for (size_t i = 0; i < k; i++) {
        size_t lo = i * CHUNK_BYTES, len = bytes - lo < CHUNK_BYTES ? bytes - lo : CHUNK_BYTES;
        if (rel != 0) {
            int e = wait_recv(c, rq[i]);
            if (rc == 0) rc = e;
        }
        if (rel != P - 1 && rc == 0) rc = send_msg(c, right, b + lo, len, tag);
    }
    free(rq);
    return rc;
}

/* Dissemination barrier: ceil(log2 P) rounds of one-byte messages. */
static int host_barrier(comm *c)
{
    int P = c->size;
    uint32_t tag = coll_tag(c);
    for (int k = 1; k < P; k <<= 1) {
        char out = 1, in = 0;
        req *r = post_recv(c, c->ranks[(c->pos - k % P + P) % P], &in, 1, tag);
        int rc = send_msg(c, c->ranks[(c->pos + k) % P], &out, 1, tag);
        int e = wait_recv(c, r);
        if (rc || e) return -1;
    }
    return 0;
}

/* Transfer time of the batch: the sends, plus each receive from its first byte
 * (or the batch's start, when it was already arriving) to its last. Time before a
 * receive's first byte is the peer not having sent yet: waiting, not transfer. */
static int host_p2p_batch(comm *c, comm_p2p *ops, int n)
{
    double t0 = atoll_mono_s(), xfer = 0;
    req **rq = calloc((size_t)n, sizeof(req *));
    for (int i = 0; i < n; i++)
        if (!ops[i].is_send) rq[i] = post_recv(c, c->ranks[ops[i].peer], ops[i].buf, ops[i].bytes, ops[i].tag);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (ops[i].is_send) {
            double ts = atoll_mono_s();
            rc = send_msg(c, c->ranks[ops[i].peer], ops[i].buf, ops[i].bytes, ops[i].tag);
            xfer += atoll_mono_s() - ts;
        }
    for (int i = 0; i < n; i++)
        if (rq[i]) {
            double when[2] = {0, 0};
            int e = wait_recv_timed(c, rq[i], when);
            if (rc == 0) rc = e;
            double from = when[0] > t0 ? when[0] : t0;
            if (when[1] > from) xfer += when[1] - from;
        }
    free(rq);
    double total = atoll_mono_s() - t0;
    c->xfer_s += xfer < total ? xfer : total;
    return rc;
}

const comm_backend comm_host_backend = {
    .name = "host",
    .world_init = host_world_init,
    .world_free = host_world_free,
    .group_init = host_group_init,
    .group_free = host_group_free,
    .allreduce = host_allreduce,
    .reduce_scatter = host_reduce_scatter,
    .reduce = host_reduce,
    .allgather = host_allgather,
    .broadcast = host_broadcast,
    .barrier = host_barrier,
    .p2p_batch = host_p2p_batch,
};
