/* par_peer_auth: the host transport's rank-to-rank links require the job secret.
 * Rank 0 of a two-rank world waits for its peer; an impostor that read rank 0's
 * address from the store connects first claiming to be rank 1, but cannot prove
 * the secret: rank 0 must drop it (sending it nothing of the job's traffic) and
 * go on to mesh with the real rank 1, whose all-reduce then gives the right sum. */
#include "check.h"
#include "comm.h"
#include "store.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* What a rank needs to join, written by the parent once the store runs. */
typedef struct {
    int port;
    store_auth auth;
} join_info;

/* A rank process, forked before the store's thread exists (a child forked from a
 * threaded parent may inherit a lock another thread held: under ASan, now and
 * then, a hang). It waits on `fd` for the store's address and secret. */
static int rank_run(int rank, int fd)
{
    join_info ji;
    if (read(fd, &ji, sizeof ji) != (ssize_t)sizeof ji) return 5;
    close(fd);
    const store_auth *auth = &ji.auth;
    int port = ji.port;
    store_client *sc;
    char err[512];
    if (store_connect("127.0.0.1", port, auth, 5000, &sc, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 2;
    }
    comm_world *w;
    if (comm_world_init(&w, COMM_BACKEND_HOST, rank, 2, sc, "peer", 0, 10000, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 3;
    }
    float x = (float)(rank + 1);
    int rc = comm_allreduce(comm_world_comm(w), &x, 1, COMM_SUM) || x != 3.0f ? 4 : 0;
    comm_world_free(w);
    store_close(sc);
    return rc;
}

int main(int argc, char **argv)
{
    (void)argc;
    int p0[2], p1[2];
    CHECK(pipe(p0) == 0 && pipe(p1) == 0, "pipes");
    pid_t r0 = fork();
    if (r0 == 0) _exit(rank_run(0, p0[0]));
    pid_t r1 = fork();
    if (r1 == 0) _exit(rank_run(1, p1[0])); /* released only after the impostor's attempt */
    close(p0[0]);
    close(p1[0]);
    store_server *srv;
    char err[256];
    CHECK(store_server_start_thread("127.0.0.1", 0, &srv, err, sizeof err) == 0, "%s", err);
    int port = store_server_port(srv);
    store_auth auth;
    store_server_auth(srv, &auth);
    join_info ji = { port, auth };
    CHECK(write(p0[1], &ji, sizeof ji) == (ssize_t)sizeof ji, "rank 0 told where the store is");
    close(p0[1]);

    /* The impostor: it may read the address (here with the secret, as a stand-in for
     * anyone who learns it) but does not prove the secret on the link itself. */
    store_client *sc;
    CHECK(store_connect("127.0.0.1", port, &auth, 5000, &sc, err, sizeof err) == STORE_OK, "%s", err);
    void *val = NULL;
    size_t len = 0;
    CHECK(store_wait(sc, "peer/host/addr/0", 10000, &val, &len) == STORE_OK, "rank 0 published its address");
    char *colon = val ? strrchr(val, ':') : NULL;
    CHECK(colon != NULL, "address '%s'", val ? (char *)val : "");
    if (colon) {
        *colon = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)) };
        inet_pton(AF_INET, val, &sa.sin_addr);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "impostor connects");
        struct { uint32_t magic, rank; uint8_t nonce[32]; } hello = { 0x41544c4cu, 1, { 0 } };
        CHECK(send(fd, &hello, sizeof hello, 0) == (ssize_t)sizeof hello, "impostor claims rank 1");
        uint8_t reply[64], fake[32];
        struct timeval tv = { 5, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t got = recv(fd, reply, sizeof reply, MSG_WAITALL);
        CHECK(got == 64, "rank 0 challenges the claim (%zd bytes)", got);
        memset(fake, 0x5a, sizeof fake);
        send(fd, fake, sizeof fake, MSG_NOSIGNAL);
        char more;
        got = recv(fd, &more, 1, 0);
        CHECK(got == 0, "rank 0 drops the impostor without sending it anything (%zd)", got);
        close(fd);
    }
    free(val);
    store_close(sc);

    CHECK(write(p1[1], &ji, sizeof ji) == (ssize_t)sizeof ji, "rank 1 told where the store is");
    close(p1[1]);
    int st0 = -1, st1 = -1;
    waitpid(r0, &st0, 0);
    waitpid(r1, &st1, 0);
    CHECK(WIFEXITED(st0) && WEXITSTATUS(st0) == 0, "rank 0 meshed with the real rank 1 (status %d)", st0);
    CHECK(WIFEXITED(st1) && WEXITSTATUS(st1) == 0, "rank 1 joined and all-reduced (status %d)", st1);
    store_server_stop_thread(srv);
    return check_summary(argv[0]);
}
