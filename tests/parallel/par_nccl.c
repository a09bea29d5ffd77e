/* par_nccl: the NCCL backend, built only with CUDA and NCCL.
 * Without a visible GPU (CI), comm_world_init must fail cleanly with a message
 * that says so. With one, a one-rank world runs every call on device buffers
 * (NCCL will not put two ranks on one GPU; several ranks run on the emulated
 * NCCL: tests/cuda/nccl_emu_order.c, tests/cuda/engine_nccl_emu.sh). */
#include "check.h"
#include "comm.h"
#include "store.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    (void)argc;
    store_server *srv;
    store_client *sc;
    char err[512];
    CHECK(store_server_start_thread("127.0.0.1", 0, &srv, err, sizeof err) == 0, "%s", err);
    store_auth auth;
    store_server_auth(srv, &auth);
    CHECK(store_connect("127.0.0.1", store_server_port(srv), &auth, 2000, &sc, err, sizeof err) == STORE_OK, "%s",
          err);
    comm_world *w = NULL;
    CHECK(comm_world_init(&w, COMM_BACKEND_NCCL, 0, 1, sc, "t", 0, 5000, err, sizeof err) == -1 &&
          strstr(err, "COMM_DEVICE_BUFFERS"), "nccl without device buffers refused: %s", err);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        CHECK(comm_world_init(&w, COMM_BACKEND_NCCL, 0, 1, sc, "t", COMM_DEVICE_BUFFERS, 5000, err, sizeof err) == -1 &&
              strstr(err, "no CUDA device"), "no GPU: clean error expected, got: %s", err);
        printf("no CUDA device: checked the clean failure only\n");
    } else {
        int rc = comm_world_init(&w, COMM_BACKEND_NCCL, 0, 1, sc, "t", COMM_DEVICE_BUFFERS, 30000, err, sizeof err);
        CHECK(rc == 0, "nccl world: %s", err);
        if (rc == 0) {
            int r0 = 0;
            comm *g;
            CHECK(comm_group_new(w, "tp", &r0, 1, &g) == 0 && g, "split: %s", comm_error(w));
            size_t n = 1000;
            float h[1000], back[1000], *d;
            for (size_t i = 0; i < n; i++) h[i] = (float)i;
            cudaMalloc((void **)&d, 2 * n * sizeof(float));
            cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
            CHECK(comm_allreduce(g, d, n, COMM_SUM) == 0 && comm_allreduce(g, d, n, COMM_AVG) == 0, "%s", comm_error(w));
            CHECK(comm_reduce_scatter(g, d, d + n, n, COMM_SUM) == 0, "%s", comm_error(w));
            CHECK(comm_allgather(g, d + n, d, n) == 0, "%s", comm_error(w));
            CHECK(comm_broadcast(g, d, n * sizeof(float), 0) == 0 && comm_barrier(g) == 0, "%s", comm_error(w));
            cudaMemcpy(back, d, n * sizeof(float), cudaMemcpyDeviceToHost);
            CHECK(memcmp(h, back, sizeof h) == 0, "one-rank collectives leave the data as it was");
            cudaFree(d);
            comm_world_free(w);
        }
    }
    store_close(sc);
    store_server_stop_thread(srv);
    return check_summary(argv[0]);
}
