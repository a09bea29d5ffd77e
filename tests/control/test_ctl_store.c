/* The SQLite store: schema and migrations, CRUD, and what survives a kill -9
 * of a process in the middle of its work (committed: all; uncommitted: none). */
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "store.h"

static char dir[] = "/tmp/ctl_store_XXXXXX";
static char path[128];

static int count_events(void *ctx, const store_event *e)
{
    (void)e;
    (*(int *)ctx)++;
    return 0;
}

static int count_steps(void *ctx, const store_step *st)
{
    (void)st;
    (*(int *)ctx)++;
    return 0;
}

static int count_jobs(void *ctx, store_job *j)
{
    (void)j;
    (*(int *)ctx)++;
    return 0;
}

static void basic(void)
{
    store *s;
    char err[256];
    CHECK(store_open(&s, path, err, sizeof err) == 0, "%s", err);
    CHECK(store_schema_version(s) == STORE_SCHEMA_VERSION, "version %d", store_schema_version(s));
    store_job j = { 0 };
    snprintf(j.name, sizeof j.name, "first");
    j.spec = (uint8_t *)"\x10\x08";
    j.spec_len = 2;
    j.created_ms = j.updated_ms = 1000;
    CHECK(store_job_insert(s, &j) == 0 && j.id == 1, "insert id %llu", (unsigned long long)j.id);
    j.spec = NULL;
    j.state = 3;
    j.step = 77;
    j.loss = 2.5;
    snprintf(j.message, sizeof j.message, "running fine");
    CHECK(store_job_update(s, &j) == 0, "update");
    store_job g;
    CHECK(store_job_get(s, 1, &g) == 0, "get");
    CHECK(g.state == 3 && g.step == 77 && g.loss == 2.5 && !strcmp(g.message, "running fine") && g.spec_len == 2 &&
              !memcmp(g.spec, "\x10\x08", 2), "job fields after update");
    store_job_clear(&g);
    CHECK(store_job_get(s, 99, &g) == 1, "missing job must be 'not found'");
    /* Request ids: found again, unique; pages of jobs by id. */
    int n;
    store_job r2 = { .state = 0, .spec = (uint8_t *)"x", .spec_len = 1, .created_ms = 1, .updated_ms = 1 };
    snprintf(r2.name, sizeof r2.name, "r2");
    snprintf(r2.request_id, sizeof r2.request_id, "req-1");
    CHECK(store_job_insert(s, &r2) == 0 && r2.id == 2, "insert with a request id");
    CHECK(store_job_by_request(s, "req-1", &g) == 0 && g.id == 2 && !strcmp(g.request_id, "req-1"), "by request id");
    store_job_clear(&g);
    CHECK(store_job_insert(s, &r2) == -1, "a second job with the same request id");
    r2.request_id[0] = 0;
    CHECK(store_job_insert(s, &r2) == 0 && store_job_insert(s, &r2) == 0 && r2.id == 4, "jobs without request ids");
    n = 0;
    CHECK(store_jobs_page(s, 1, 2, count_jobs, &n) == 0 && n == 2, "page of 2 after id 1: %d", n);
    n = 0;
    CHECK(store_jobs_page(s, 3, 100, count_jobs, &n) == 0 && n == 1, "last page");
    CHECK(store_job_set_message(s, 4, "waiting") == 0 && store_job_get(s, 4, &g) == 0 && !strcmp(g.message, "waiting"),
          "set message");
    store_job_clear(&g);
    store_idlist ids = { 0 };
    CHECK(store_job_ids(s, 0, 2, 0, &ids) == 0 && ids.n == 2 && ids.ids[0] == 3, "pending ids after 2: %zu", ids.n);
    free(ids.ids);
    store_job missing = { .id = 99 };
    CHECK(store_job_update(s, &missing) == -1, "update of a missing job must fail");
    for (int i = 0; i < 5; i++) CHECK(store_event_add(s, 2000 + i, "k", "subj", "msg", NULL) == 0, "event");
    n = 0;
    store_events_each(s, 0, 3, count_events, &n);
    CHECK(n == 3, "limit 3 gave %d", n);
    n = 0;
    store_events_each(s, 4, 0, count_events, &n);
    CHECK(n == 1, "after 4 gave %d", n);
    CHECK(store_layout_put(s, 1, 0, (const uint8_t *)"L0", 2) == 0 && store_layout_put(s, 1, 1, (const uint8_t *)"L1", 2) == 0,
          "layouts");
    uint8_t *b;
    size_t bl;
    CHECK(store_layout_get(s, 1, 1, &b, &bl) == 0 && bl == 2 && !memcmp(b, "L1", 2), "layout epoch 1");
    free(b);
    CHECK(store_layout_get(s, 1, 2, &b, &bl) == 1, "no layout for epoch 2");
    /* steps: put, replace, latest, range, thinning of the older ones */
    store_step st = { .job = 1, .epoch = 0, .have_job = 1, .loss = 5.0, .nstages = 2, .bubble = { 0.25, 0.5 },
                      .transfer = { 0.01, -1 } };
    for (int i = 1; i <= 20; i++) {
        st.iteration = i;
        st.loss = 5.0 - 0.1 * i;
        CHECK(store_step_put(s, &st) == 0, "step %d", i);
    }
    store_step got;
    CHECK(store_step_get(s, 1, 7, &got) == 0 && got.nstages == 2 && got.bubble[1] == 0.5 && got.transfer[1] == -1 &&
          got.loss > 4.29 && got.loss < 4.31, "step 7 round-trips");
    CHECK(store_step_latest(s, 1, &got) == 0 && got.iteration == 20, "latest is 20");
    CHECK(store_step_get(s, 2, 7, &got) == 1, "no steps of job 2");
    int64_t older = 0;
    CHECK(store_steps_thin(s, 1, 11) == 0 && store_steps_count(s, 1, 11, &older) == 0 && older == 5,
          "thinning halves the steps below 11: %lld left", (long long)older);
    CHECK(store_step_get(s, 1, 1, &got) == 0 && store_step_get(s, 1, 2, &got) == 1 &&
          store_step_get(s, 1, 12, &got) == 0, "the oldest and the recent ones stay");
    n = 0;
    store_steps_each(s, 1, 10, 3, count_steps, &n);
    CHECK(n == 3, "range after 10, limit 3: %d", n);
    /* rank exits are recorded once per (job, epoch, rank) */
    store_exit ex = { .job = 1, .epoch = 0, .rank = 0, .pid = 10 };
    CHECK(store_exit_put(s, &ex) == 1 && store_exit_put(s, &ex) == 0, "an exit is recorded once");
    ex.rank = 1;
    ex.term_signal = 9;
    CHECK(store_exit_put(s, &ex) == 1, "second rank's exit");
    int total = 0, ok = 0;
    CHECK(store_exits_count(s, 1, 0, &total, &ok, NULL) == 0 && total == 2 && ok == 1, "exits %d, ok %d", total, ok);
    /* A rolled-back transaction leaves nothing. */
    store_begin(s);
    store_event_add(s, 1, "rolled", "back", "x", NULL);
    store_rollback(s);
    n = 0;
    store_events_each(s, 0, 0, count_events, &n);
    CHECK(n == 5, "rollback kept an event (%d)", n);
    store_close(s);
}

/* A child commits `acked` transactions, reports each on a pipe (the "ack" a
 * client would get), starts one more transaction and is killed with SIGKILL. */
static void unclean_close(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        store *s;
        char err[256];
        if (store_open(&s, path, err, sizeof err)) _exit(2);
        for (int i = 0; i < 20; i++) {
            store_begin(s);
            store_job j = { 0 };
            snprintf(j.name, sizeof j.name, "acked-%d", i);
            j.spec_len = 0;
            store_job_insert(s, &j);
            store_event_add(s, i, "job.submitted", j.name, "x", NULL);
            if (store_commit(s)) _exit(3);
            if (write(fds[1], "a", 1) != 1) _exit(4);
        }
        store_begin(s);
        store_job j = { 0 };
        snprintf(j.name, sizeof j.name, "never-acked");
        store_job_insert(s, &j);
        store_event_add(s, 99, "job.submitted", j.name, "x", NULL);
        if (write(fds[1], "u", 1) != 1) _exit(4);
        pause(); /* killed here, mid-transaction, without closing anything */
        _exit(5);
    }
    close(fds[1]);
    int acked = 0;
    char ch;
    while (read(fds[0], &ch, 1) == 1) {
        if (ch == 'a') acked++;
        if (ch == 'u') break;
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    close(fds[0]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child was not killed (status %d)", status);
    CHECK(acked == 20, "child acknowledged %d transactions", acked);

    store *s;
    char err[256];
    CHECK(store_open(&s, path, err, sizeof err) == 0, "reopen after kill -9: %s", err);
    int jobs = 0, events = 0;
    store_jobs_each(s, -1, count_jobs, &jobs);
    store_events_each(s, 0, 0, count_events, &events);
    /* basic() left 4 jobs and 5 events. */
    CHECK(jobs == 4 + 20, "jobs after reopen: %d, want 24 (every acknowledged one, no other)", jobs);
    CHECK(events == 5 + 20, "events after reopen: %d, want 25", events);
    store_job j;
    CHECK(store_job_get(s, 24, &j) == 0 && !strcmp(j.name, "acked-19"), "last acknowledged job is there");
    store_job_clear(&j);
    CHECK(store_job_get(s, 25, &j) == 1, "the unacknowledged job survived the crash");
    store_close(s);
}

static void migrations(void)
{
    /* Rewind the file to schema 1 by hand; opening must migrate it forward. */
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK, "sqlite open");
    CHECK(sqlite3_exec(db, "DROP INDEX jobs_request_id; ALTER TABLE jobs DROP COLUMN request_id; "
                           "DROP TABLE steps; DROP TABLE rank_exits; DROP INDEX jobs_state; DROP TABLE restarts; "
                           "ALTER TABLE jobs DROP COLUMN world; ALTER TABLE jobs DROP COLUMN checkpoint; "
                           "ALTER TABLE jobs DROP COLUMN started_ms; ALTER TABLE jobs DROP COLUMN ended_ms; "
                           "ALTER TABLE jobs DROP COLUMN lost_startup_ms; ALTER TABLE jobs DROP COLUMN lost_ckpt_ms; "
                           "ALTER TABLE jobs DROP COLUMN lost_detect_ms; ALTER TABLE jobs DROP COLUMN lost_restart_ms; "
                           "ALTER TABLE jobs DROP COLUMN lost_recompute_ms; ALTER TABLE jobs DROP COLUMN stop_asked; "
                           "PRAGMA user_version=1;", NULL, NULL, NULL) == SQLITE_OK,
          "rewind: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
    store *s;
    char err[256];
    CHECK(store_open(&s, path, err, sizeof err) == 0, "migrate from 1: %s", err);
    CHECK(store_schema_version(s) == STORE_SCHEMA_VERSION, "version after migration %d", store_schema_version(s));
    store_step one = { .job = 1, .iteration = 1, .nstages = 1, .bubble_theory = 0.25 }, got;
    CHECK(store_step_put(s, &one) == 0 && store_step_get(s, 1, 1, &got) == 0 && got.bubble_theory == 0.25,
          "steps table after migration, with each step's bubble theory");
    store_job j;
    CHECK(store_job_get(s, 1, &j) == 0, "data kept through migration");
    CHECK(j.world == 0 && j.checkpoint == 0 && j.started_ms == 0 && j.lost_restart_ms == 0 && j.stop_asked == 0,
          "the columns added for restarts and stops start at 0");
    /* the stop asked of a job is kept with it */
    j.stop_asked = 1;
    CHECK(store_job_update(s, &j) == 0, "update with a stop asked");
    store_job_clear(&j);
    CHECK(store_job_get(s, 1, &j) == 0 && j.stop_asked == 1, "the stop asked reads back");
    store_job_clear(&j);
    /* restart history rows and the checkpoint note */
    store_restart r = { .job = 1, .epoch = 2, .rank = 3, .fault_ms = 10, .detected_ms = 20, .reached = 7, .dp = 1,
                        .counted = 1 };
    snprintf(r.cause, sizeof r.cause, "hang");
    snprintf(r.node, sizeof r.node, "n1");
    snprintf(r.detail, sizeof r.detail, "rank 3 stopped");
    CHECK(store_restart_put(s, &r) == 0, "restart put");
    r.epoch = 3;
    r.counted = 0;
    CHECK(store_restart_put(s, &r) == 0, "second restart put");
    store_restart back;
    int counted = -1;
    CHECK(store_restart_get(s, 1, 2, &back) == 0 && !strcmp(back.cause, "hang") && back.rank == 3 &&
          back.reached == 7 && !strcmp(back.detail, "rank 3 stopped"), "restart row round trip");
    CHECK(store_restarts_counted(s, 1, &counted) == 0 && counted == 1, "counted restarts: %d", counted);
    CHECK(store_restart_get(s, 1, 9, &back) == 1, "no row for an epoch that never was");
    CHECK(store_job_note_checkpoint(s, 1, 40, 25) == 0 && store_job_note_checkpoint(s, 1, 30, 5) == 0 &&
          store_job_get(s, 1, &j) == 0 && j.checkpoint == 40 && j.lost_ckpt_ms == 30,
          "checkpoint only moves forward, stalls add up: %lld %lld", (long long)j.checkpoint, (long long)j.lost_ckpt_ms);
    store_job_clear(&j);
    CHECK(store_job_by_request(s, "never", &j) == 1, "request ids after migration");
    store_close(s);
    /* A file from a newer coordinatord is refused, not silently used. */
    sqlite3_open(path, &db);
    sqlite3_exec(db, "PRAGMA user_version=99;", NULL, NULL, NULL);
    sqlite3_close(db);
    CHECK(store_open(&s, path, err, sizeof err) == -1 && strstr(err, "99"), "newer schema: %s", err);
    /* WAL mode is what makes the crash test above meaningful. */
    sqlite3_open(path, &db);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    sqlite3_step(st);
    CHECK(!strcmp((const char *)sqlite3_column_text(st, 0), "wal"), "journal mode %s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/state.db", dir);
    basic();
    unclean_close();
    migrations();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return check_summary(argv[0]);
}
