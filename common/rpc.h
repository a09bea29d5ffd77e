/* rpc: atoll connections: framed protobuf messages over TCP, authenticated with
 * the cluster token (auth.h) before anything else is accepted, and every frame
 * after the handshake carrying its MAC and sequence number (auth_session).
 *
 * Two flavours over the same wire format (proto/README.md):
 *  - event-loop connections for the daemons (libuv): rpc_server_listen accepts
 *    and runs the server side of the handshake; rpc_connect runs the client side.
 *    Callbacks see only authenticated peers. One connection = one rpc_conn, owned
 *    by this module: it is freed after its on_close callback returns.
 *  - a blocking client for the CLI and tools (rpc_sync_*): one request, one reply.
 *
 * Requests on one connection are answered in order; a client keeps at most one
 * request outstanding unless the message type says otherwise (heartbeats).
 *
 * Fairness on the server side: each connection gets at most RPC_FRAMES_PER_TURN
 * frames handled per loop turn; the rest wait in its buffer (reading stops, so TCP
 * pushes back) and are handled on later turns, after every other connection's
 * turn, so one client pipelining bulk requests never holds heartbeats back. A
 * connection whose replies are not being read (more than RPC_WRITE_PAUSE bytes
 * queued) is not served until they drain.
 *
 * Before authentication a frame may carry at most RPC_PREAUTH_MAX bytes of
 * payload, reads are small, and failed authentications are throttled per peer
 * address (RPC_AUTH_FAIL_BURST, then one more per RPC_AUTH_FAIL_REFILL_MS). */
#ifndef ATOLL_RPC_H
#define ATOLL_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "atoll.pb-c.h"
#include "auth.h"
#include "turnq.h"
#include "frame.h"

#define RPC_PROTOCOL 2               /* 2: per-frame MACs after the handshake */
#define RPC_MAX_QUEUED (64u << 20)   /* bytes waiting to be written before a slow peer is dropped */
#define RPC_WRITE_PAUSE (1u << 20)   /* queued reply bytes above which a peer's requests wait */
#define RPC_FRAMES_PER_TURN 1        /* frames handled per connection per loop turn (server side) */
#define RPC_PREAUTH_MAX 1024         /* payload limit of a frame before the handshake completes */
#define RPC_MAX_UNAUTHED 1024        /* connections still authenticating, in all */
#define RPC_MAX_UNAUTHED_PER_PEER 64 /* ... from one address */
#define RPC_AUTH_FAIL_BURST 10       /* failed authentications one address may make at once */
#define RPC_AUTH_FAIL_REFILL_MS 1000 /* then one more per this many ms */
#define RPC_THROTTLE_SLOTS 256       /* addresses remembered */

/* "HOST:PORT" (IPv4 literal or a resolvable name; port may be 0 for listeners).
 * 0, or -1 with err naming the address and the expected form. */
int rpc_resolve(const char *hostport, struct sockaddr_storage *out, char *err, size_t errlen);

typedef struct rpc_conn rpc_conn;

typedef struct rpc_handlers {
    void (*on_ready)(rpc_conn *c);   /* handshake passed */
    void (*on_frame)(rpc_conn *c, uint16_t type, const uint8_t *payload, size_t len);
    void (*on_close)(rpc_conn *c);   /* c->err says why when it was not a clean close */
} rpc_handlers;

struct rpc_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_shutdown_t shutdown_req;
    frame_decoder dec;
    const auth_token *token;
    rpc_handlers h;
    void *data;                   /* owner's pointer */
    struct rpc_server *server;    /* NULL for outgoing connections */
    int is_client, authed, closing, connected;
    int role;                     /* Atoll__Role the peer claimed (server side) */
    uint64_t job;                 /* ROLE_RANK: the (job, epoch) whose secret it proved */
    uint32_t epoch;
    uint8_t nonce[AUTH_NONCE_LEN], client_nonce[AUTH_NONCE_LEN];
    auth_session sess;            /* per-frame MACs once sealed */
    int sealed_in, sealed_out;    /* frames read / written carry tags */
    uint32_t max_frame;           /* payload limit after the handshake */
    char peer[64];                /* "127.0.0.1:50312" */
    uint32_t peer_ip;             /* IPv4, host order; 0 when unknown */
    char name[64];                /* the peer's name from Auth */
    char err[256];
    rpc_conn *prev, *next;        /* the server's list of its connections */
    turnq_link turn;              /* in the server's queue of connections with frames waiting */
    int reading, write_wait, counted_unauthed;
    uint64_t accepted_ms;         /* loop time of accept, for the auth deadline */
};

/* Failed authentications of one peer address: a token bucket. */
typedef struct rpc_throttle {
    uint32_t ip;
    uint32_t unauthed;            /* its connections still authenticating */
    double tokens;                /* failures it may still make now */
    uint64_t at_ms;               /* when tokens was last brought up to date */
    uint64_t refused;             /* connections refused while it had none */
} rpc_throttle;

typedef struct rpc_server {
    uv_tcp_t tcp;
    uv_loop_t *loop;
    const auth_token *token;
    uint32_t max_frame;
    rpc_handlers h;
    void *data;
    int port;                     /* the bound port (useful with port 0) */
    uint64_t refused;             /* connections refused for auth or framing */
    uint32_t auth_timeout_ms;     /* a peer must authenticate this soon after accept (default 10 s) */
    rpc_conn *conns;              /* every open connection, authenticated or not */
    uv_timer_t sweep;             /* enforces auth_timeout_ms */
    uv_idle_t pump;               /* runs the ready queue once per loop turn */
    turnq ready;                  /* connections with whole frames waiting, in turn order */
    uint32_t unauthed;            /* connections still authenticating */
    rpc_throttle throttle[RPC_THROTTLE_SLOTS];
} rpc_server;

int rpc_server_listen(rpc_server *s, uv_loop_t *loop, const char *hostport, const auth_token *token,
                      uint32_t max_frame, const rpc_handlers *h, void *data, char *err, size_t errlen);
/* Stops listening and closes every connection (each gets its on_close). */
void rpc_server_close(rpc_server *s);

/* Starts connecting; the result is reported through h->on_ready or h->on_close. */
rpc_conn *rpc_connect(uv_loop_t *loop, const struct sockaddr *addr, const auth_token *token,
                      int role, const char *name, uint32_t max_frame, const rpc_handlers *h, void *data);

/* Queues one frame (with its tag once the connection is sealed). -1 when the
 * connection is closing or the peer is not reading. */
int rpc_send(rpc_conn *c, uint16_t type, const ProtobufCMessage *m);
int rpc_send_error(rpc_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Closes after what is queued has been written (so a final Error reaches the peer). */
void rpc_close(rpc_conn *c, const char *reason);

/* ---- blocking client ---- */

typedef enum {
    RPC_OK = 0,
    RPC_REFUSED = 1,      /* the coordinator answered with an Error (message in err) */
    RPC_UNREACHABLE = 3,  /* connect failed, timed out or the connection broke */
    RPC_PROTOCOL_ERR = 4, /* the reply was not what the protocol says */
} rpc_status;

typedef struct rpc_sync {
    int fd;
    int timeout_ms;
    uint32_t max_frame;
    auth_session sess;
    int sealed;                   /* the handshake is done: frames carry tags */
} rpc_sync;

/* Connects and authenticates. */
rpc_status rpc_sync_open(rpc_sync *s, const char *hostport, const auth_token *token, int role,
                         const char *name, int timeout_ms, char *err, size_t errlen);
/* The same as a rank of (job, epoch), proving `secret` (auth_job_secret) instead of
 * the cluster token. Such a connection may use that scope's rendezvous keys only. */
rpc_status rpc_sync_open_rank(rpc_sync *s, const char *hostport, const auth_token *secret, uint64_t job,
                              uint32_t epoch, const char *name, int timeout_ms, char *err, size_t errlen);
void rpc_sync_close(rpc_sync *s);
rpc_status rpc_sync_send(rpc_sync *s, uint16_t type, const ProtobufCMessage *m, char *err, size_t errlen);
/* Reads one frame; an Error frame is returned as RPC_REFUSED with its message.
 * *reply is unpacked with the descriptor of the frame's type; free it with
 * protobuf_c_message_free_unpacked. */
rpc_status rpc_sync_recv(rpc_sync *s, uint16_t *type, ProtobufCMessage **reply, char *err, size_t errlen);
/* send + recv, checking the reply type. */
rpc_status rpc_sync_call(rpc_sync *s, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type,
                         ProtobufCMessage **reply, char *err, size_t errlen);

#endif
