#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervise.h"

struct store {
    sqlite3 *db;
};

/* Migration i takes the schema from version i to i+1. Append only: a released
 * migration is never edited, since files in the field already ran it. */
static const char *MIGRATIONS[STORE_SCHEMA_VERSION] = {
    /* 0 -> 1: the first schema */
    "CREATE TABLE nodes("
    "  name TEXT PRIMARY KEY, info BLOB NOT NULL, state INTEGER NOT NULL,"
    "  drained INTEGER NOT NULL DEFAULT 0, registered_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL);"
    "CREATE TABLE jobs("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, spec BLOB NOT NULL,"
    "  state INTEGER NOT NULL, message TEXT NOT NULL DEFAULT '',"
    "  restarts INTEGER NOT NULL DEFAULT 0, epoch INTEGER NOT NULL DEFAULT 0,"
    "  step INTEGER NOT NULL DEFAULT 0, loss REAL NOT NULL DEFAULT 0, tokens_per_s REAL NOT NULL DEFAULT 0,"
    "  mfu REAL NOT NULL DEFAULT 0, bubble_measured REAL NOT NULL DEFAULT 0,"
    "  bubble_theory REAL NOT NULL DEFAULT 0,"
    "  created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);"
    "CREATE TABLE layouts(job INTEGER NOT NULL, epoch INTEGER NOT NULL, layout BLOB NOT NULL,"
    "  PRIMARY KEY(job, epoch));"
    "CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL,"
    "  kind TEXT NOT NULL, subject TEXT NOT NULL, message TEXT NOT NULL);",
    /* 1 -> 2: rendezvous keys, and jobs looked up by state by the scheduler */
    "CREATE TABLE kv(job INTEGER NOT NULL, epoch INTEGER NOT NULL, key TEXT NOT NULL,"
    "  value BLOB NOT NULL, PRIMARY KEY(job, epoch, key));"
    "CREATE INDEX jobs_state ON jobs(state);",
    /* 2 -> 3: rendezvous keys move to memory (bounded, per job); per-step metrics
     * of jobs (recent in full, older thinned by the coordinator); rank exits */
    "DROP TABLE kv;"
    "CREATE TABLE steps(job INTEGER NOT NULL, iteration INTEGER NOT NULL, epoch INTEGER NOT NULL,"
    "  time_ms INTEGER NOT NULL, have_job INTEGER NOT NULL, loss REAL NOT NULL, lr REAL NOT NULL,"
    "  grad_norm REAL NOT NULL, tokens_per_s REAL NOT NULL, step_ms REAL NOT NULL,"
    "  flops_per_gpu REAL NOT NULL, peak_flops REAL NOT NULL, memory_bytes INTEGER NOT NULL,"
    "  bubble TEXT NOT NULL, transfer TEXT NOT NULL, PRIMARY KEY(job, iteration)) WITHOUT ROWID;"
    "CREATE TABLE rank_exits(job INTEGER NOT NULL, epoch INTEGER NOT NULL, rank INTEGER NOT NULL,"
    "  pid INTEGER NOT NULL, exit_status INTEGER NOT NULL, term_signal INTEGER NOT NULL,"
    "  stopped INTEGER NOT NULL, time_ms INTEGER NOT NULL, node TEXT NOT NULL, log_tail TEXT NOT NULL,"
    "  PRIMARY KEY(job, epoch, rank));",
    /* 3 -> 4: idempotent submissions (a retry finds the job its first try created) */
    ("ALTER TABLE jobs ADD COLUMN request_id TEXT;"
     "CREATE UNIQUE INDEX jobs_request_id ON jobs(request_id) WHERE request_id IS NOT NULL;"),
    /* 4 -> 5: elastic restarts (their history, the placement's size, the newest
     * checkpoint) and goodput (when the job ran, wall time lost by cause) */
    "ALTER TABLE jobs ADD COLUMN world INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN checkpoint INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN started_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN ended_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN lost_startup_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN lost_ckpt_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN lost_detect_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN lost_restart_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN lost_recompute_ms INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE restarts(job INTEGER NOT NULL, epoch INTEGER NOT NULL, cause TEXT NOT NULL,"
    "  detail TEXT NOT NULL, node TEXT NOT NULL, rank INTEGER NOT NULL, fault_ms INTEGER NOT NULL,"
    "  detected_ms INTEGER NOT NULL, running_ms INTEGER NOT NULL, reached INTEGER NOT NULL,"
    "  from_iteration INTEGER NOT NULL, steps_recomputed INTEGER NOT NULL, dp INTEGER NOT NULL,"
    "  counted INTEGER NOT NULL, PRIMARY KEY(job, epoch));",
    /* 5 -> 6: the validation loss of a step that was followed by an evaluation */
    "ALTER TABLE steps ADD COLUMN valid_loss REAL NOT NULL DEFAULT 0;",
    /* 6 -> 7: atoll cancel --checkpoint was asked (a coordinator restart keeps why the job stops) */
    "ALTER TABLE jobs ADD COLUMN stop_asked INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: each step's ideal-schedule bubble, as rank 0 reported it (its placement and batch) */
    "ALTER TABLE steps ADD COLUMN bubble_theory REAL NOT NULL DEFAULT 0;",
};

const char *store_errmsg(store *s) { return sqlite3_errmsg(s->db); }

int store_schema_version(store *s)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

static int migrate(store *s, char *err, size_t errlen)
{
    int v = store_schema_version(s);
    if (v < 0) {
        snprintf(err, errlen, "cannot read the schema version: %s", sqlite3_errmsg(s->db));
        return -1;
    }
    if (v > STORE_SCHEMA_VERSION) {
        snprintf(err, errlen, "the state database has schema version %d; this coordinatord knows up to %d "
                 "(run a newer coordinatord)", v, STORE_SCHEMA_VERSION);
        return -1;
    }
    for (; v < STORE_SCHEMA_VERSION; v++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", v + 1);
        char *msg = NULL;
        /* The DDL and the version bump commit together, so a crash mid-migration re-runs it. */
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(s->db, MIGRATIONS[v], NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(s->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
            snprintf(err, errlen, "migration to schema version %d failed: %s", v + 1, msg ? msg : "?");
            sqlite3_free(msg);
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

int store_open(store **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    store *s = calloc(1, sizeof *s);
    if (!s) return -1;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL)
        != SQLITE_OK) {
        snprintf(err, errlen, "cannot open the state database %s: %s", path,
                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
        sqlite3_close(s->db);
        free(s);
        return -1;
    }
    sqlite3_busy_timeout(s->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
                     NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, msg ? msg : "cannot set WAL mode");
        sqlite3_free(msg);
        store_close(s);
        return -1;
    }
    if (migrate(s, err, errlen)) {
        store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void store_close(store *s)
{
    if (!s) return;
    sqlite3_close(s->db);
    free(s);
}

static int exec(store *s, const char *sql) { return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1; }

int store_reset(store *s)
{
    /* Every table the migrations made, whatever they are now. */
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    char sql[4096] = "BEGIN;";
    size_t n = strlen(sql);
    while (sqlite3_step(st) == SQLITE_ROW && n < sizeof sql - 128)
        n += (size_t)snprintf(sql + n, sizeof sql - n, "DELETE FROM \"%s\";", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    snprintf(sql + n, sizeof sql - n, "DELETE FROM sqlite_sequence; COMMIT;");
    return exec(s, sql);
}
int store_begin(store *s) { return exec(s, "BEGIN IMMEDIATE"); }
int store_commit(store *s) { return exec(s, "COMMIT"); }
void store_rollback(store *s) { exec(s, "ROLLBACK"); }

static sqlite3_stmt *prep(store *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
    return st;
}

/* Runs a statement that returns no rows; finalizes it. */
static int done(sqlite3_stmt *st)
{
    if (!st) return -1;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

static void text(char *dst, size_t cap, const unsigned char *src)
{
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

/* ---- nodes ---- */

int store_node_put(store *s, const store_node *n)
{
    sqlite3_stmt *st = prep(s, "INSERT INTO nodes(name, info, state, drained, registered_ms, last_seen_ms) "
                               "VALUES(?1,?2,?3,?4,?5,?6) ON CONFLICT(name) DO UPDATE SET info=?2, state=?3, "
                               "drained=?4, last_seen_ms=?6");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, n->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, n->info, (int)n->info_len, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, n->state);
    sqlite3_bind_int(st, 4, n->drained);
    sqlite3_bind_int64(st, 5, n->registered_ms);
    sqlite3_bind_int64(st, 6, n->last_seen_ms);
    return done(st);
}

int store_node_set_state(store *s, const char *name, int state, int drained, int64_t last_seen_ms)
{
    sqlite3_stmt *st = prep(s, "UPDATE nodes SET state=?2, drained=?3, last_seen_ms=?4 WHERE name=?1");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, state);
    sqlite3_bind_int(st, 3, drained);
    sqlite3_bind_int64(st, 4, last_seen_ms);
    return done(st);
}

int store_nodes_each(store *s, store_node_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT name, info, state, drained, registered_ms, last_seen_ms FROM nodes ORDER BY name");
    if (!st) return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_node n;
        text(n.name, sizeof n.name, sqlite3_column_text(st, 0));
        n.info = sqlite3_column_blob(st, 1);
        n.info_len = (size_t)sqlite3_column_bytes(st, 1);
        n.state = sqlite3_column_int(st, 2);
        n.drained = sqlite3_column_int(st, 3);
        n.registered_ms = sqlite3_column_int64(st, 4);
        n.last_seen_ms = sqlite3_column_int64(st, 5);
        if (fn(ctx, &n)) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* ---- events ---- */

int store_event_add(store *s, int64_t time_ms, const char *kind, const char *subject,
                    const char *message, uint64_t *id)
{
    sqlite3_stmt *st = prep(s, "INSERT INTO events(time_ms, kind, subject, message) VALUES(?1,?2,?3,?4)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, time_ms);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, subject, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, message, -1, SQLITE_TRANSIENT);
    if (done(st)) return -1;
    if (id) *id = (uint64_t)sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_events_each(store *s, uint64_t after_id, unsigned limit, store_event_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT id, time_ms, kind, subject, message FROM "
                               "(SELECT * FROM events WHERE id > ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)after_id);
    sqlite3_bind_int(st, 2, (int)(limit ? limit : 1000));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_event e;
        e.id = (uint64_t)sqlite3_column_int64(st, 0);
        e.time_ms = sqlite3_column_int64(st, 1);
        e.kind = (const char *)sqlite3_column_text(st, 2);
        e.subject = (const char *)sqlite3_column_text(st, 3);
        e.message = (const char *)sqlite3_column_text(st, 4);
        if (fn(ctx, &e)) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* ---- jobs ---- */

void store_job_clear(store_job *j)
{
    free(j->spec);
    memset(j, 0, sizeof *j);
}

int store_job_insert(store *s, store_job *j)
{
    sqlite3_stmt *st = prep(s, "INSERT INTO jobs(name, spec, state, message, restarts, epoch, bubble_theory, "
                               "created_ms, updated_ms, request_id) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, j->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, j->spec ? (const void *)j->spec : "", (int)j->spec_len, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, j->state);
    sqlite3_bind_text(st, 4, j->message, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 5, (int)j->restarts);
    sqlite3_bind_int(st, 6, (int)j->epoch);
    sqlite3_bind_double(st, 7, j->bubble_theory);
    sqlite3_bind_int64(st, 8, j->created_ms);
    sqlite3_bind_int64(st, 9, j->updated_ms);
    if (j->request_id[0]) sqlite3_bind_text(st, 10, j->request_id, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, 10);
    if (done(st)) return -1;
    j->id = (uint64_t)sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_job_set_message(store *s, uint64_t id, const char *message)
{
    sqlite3_stmt *st = prep(s, "UPDATE jobs SET message=?2 WHERE id=?1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    sqlite3_bind_text(st, 2, message, -1, SQLITE_TRANSIENT);
    return done(st);
}

int store_job_update(store *s, const store_job *j)
{
    sqlite3_stmt *st = prep(s, "UPDATE jobs SET state=?2, message=?3, restarts=?4, epoch=?5, step=?6, loss=?7, "
                               "tokens_per_s=?8, mfu=?9, bubble_measured=?10, bubble_theory=?11, updated_ms=?12, "
                               "world=?13, checkpoint=?14, started_ms=?15, ended_ms=?16, lost_startup_ms=?17, "
                               "lost_ckpt_ms=?18, lost_detect_ms=?19, lost_restart_ms=?20, lost_recompute_ms=?21, "
                               "stop_asked=?22 WHERE id=?1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)j->id);
    sqlite3_bind_int(st, 2, j->state);
    sqlite3_bind_text(st, 3, j->message, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 4, (int)j->restarts);
    sqlite3_bind_int(st, 5, (int)j->epoch);
    sqlite3_bind_int64(st, 6, j->step);
    sqlite3_bind_double(st, 7, j->loss);
    sqlite3_bind_double(st, 8, j->tokens_per_s);
    sqlite3_bind_double(st, 9, j->mfu);
    sqlite3_bind_double(st, 10, j->bubble_measured);
    sqlite3_bind_double(st, 11, j->bubble_theory);
    sqlite3_bind_int64(st, 12, j->updated_ms);
    sqlite3_bind_int(st, 13, j->world);
    sqlite3_bind_int64(st, 14, j->checkpoint);
    sqlite3_bind_int64(st, 15, j->started_ms);
    sqlite3_bind_int64(st, 16, j->ended_ms);
    sqlite3_bind_int64(st, 17, j->lost_startup_ms);
    sqlite3_bind_int64(st, 18, j->lost_ckpt_ms);
    sqlite3_bind_int64(st, 19, j->lost_detect_ms);
    sqlite3_bind_int64(st, 20, j->lost_restart_ms);
    sqlite3_bind_int64(st, 21, j->lost_recompute_ms);
    sqlite3_bind_int(st, 22, j->stop_asked);
    if (done(st)) return -1;
    return sqlite3_changes(s->db) == 1 ? 0 : -1;
}

int store_job_note_checkpoint(store *s, uint64_t id, int64_t checkpoint, int64_t stall_ms)
{
    sqlite3_stmt *st = prep(s, "UPDATE jobs SET checkpoint=max(checkpoint, ?2), lost_ckpt_ms=lost_ckpt_ms+?3 "
                               "WHERE id=?1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    sqlite3_bind_int64(st, 2, checkpoint);
    sqlite3_bind_int64(st, 3, stall_ms);
    return done(st);
}

int store_job_set_metrics(store *s, uint64_t id, int64_t step, double loss, double tokens_per_s, double mfu,
                          double bubble_measured, double bubble_theory, int64_t updated_ms)
{
    sqlite3_stmt *st = prep(s, "UPDATE jobs SET step=?2, loss=?3, tokens_per_s=?4, mfu=?5, bubble_measured=?6, "
                               "updated_ms=?7, bubble_theory=CASE WHEN ?8 > 0 THEN ?8 ELSE bubble_theory END "
                               "WHERE id=?1 AND step<=?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    sqlite3_bind_int64(st, 2, step);
    sqlite3_bind_double(st, 3, loss);
    sqlite3_bind_double(st, 4, tokens_per_s);
    sqlite3_bind_double(st, 5, mfu);
    sqlite3_bind_double(st, 6, bubble_measured);
    sqlite3_bind_int64(st, 7, updated_ms);
    sqlite3_bind_double(st, 8, bubble_theory);
    return done(st);
}

#define JOB_COLUMNS "id, name, spec, state, message, restarts, epoch, step, loss, tokens_per_s, mfu, " \
                    "bubble_measured, bubble_theory, created_ms, updated_ms, request_id, world, checkpoint, " \
                    "started_ms, ended_ms, lost_startup_ms, lost_ckpt_ms, lost_detect_ms, lost_restart_ms, " \
                    "lost_recompute_ms, stop_asked"

static int read_job(sqlite3_stmt *st, store_job *j)
{
    memset(j, 0, sizeof *j);
    j->id = (uint64_t)sqlite3_column_int64(st, 0);
    text(j->name, sizeof j->name, sqlite3_column_text(st, 1));
    j->spec_len = (size_t)sqlite3_column_bytes(st, 2);
    j->spec = malloc(j->spec_len ? j->spec_len : 1);
    if (!j->spec) return -1;
    if (j->spec_len) memcpy(j->spec, sqlite3_column_blob(st, 2), j->spec_len);
    j->state = sqlite3_column_int(st, 3);
    text(j->message, sizeof j->message, sqlite3_column_text(st, 4));
    j->restarts = (uint32_t)sqlite3_column_int(st, 5);
    j->epoch = (uint32_t)sqlite3_column_int(st, 6);
    j->step = sqlite3_column_int64(st, 7);
    j->loss = sqlite3_column_double(st, 8);
    j->tokens_per_s = sqlite3_column_double(st, 9);
    j->mfu = sqlite3_column_double(st, 10);
    j->bubble_measured = sqlite3_column_double(st, 11);
    j->bubble_theory = sqlite3_column_double(st, 12);
    j->created_ms = sqlite3_column_int64(st, 13);
    j->updated_ms = sqlite3_column_int64(st, 14);
    text(j->request_id, sizeof j->request_id, sqlite3_column_text(st, 15));
    j->world = sqlite3_column_int(st, 16);
    j->checkpoint = sqlite3_column_int64(st, 17);
    j->started_ms = sqlite3_column_int64(st, 18);
    j->ended_ms = sqlite3_column_int64(st, 19);
    j->lost_startup_ms = sqlite3_column_int64(st, 20);
    j->lost_ckpt_ms = sqlite3_column_int64(st, 21);
    j->lost_detect_ms = sqlite3_column_int64(st, 22);
    j->lost_restart_ms = sqlite3_column_int64(st, 23);
    j->lost_recompute_ms = sqlite3_column_int64(st, 24);
    j->stop_asked = sqlite3_column_int(st, 25);
    return 0;
}

int store_job_get(store *s, uint64_t id, store_job *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = prep(s, "SELECT " JOB_COLUMNS " FROM jobs WHERE id=?1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    int rc = sqlite3_step(st), r;
    if (rc == SQLITE_ROW) r = read_job(st, out);
    else r = rc == SQLITE_DONE ? 1 : -1;
    sqlite3_finalize(st);
    return r;
}

int store_job_by_request(store *s, const char *request_id, store_job *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = prep(s, "SELECT " JOB_COLUMNS " FROM jobs WHERE request_id=?1");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st), r;
    if (rc == SQLITE_ROW) r = read_job(st, out);
    else r = rc == SQLITE_DONE ? 1 : -1;
    sqlite3_finalize(st);
    return r;
}

/* Runs a prepared job query, one callback per row; finalizes it. */
static int each_job(sqlite3_stmt *st, store_job_fn fn, void *ctx)
{
    if (!st) return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_job j;
        if (read_job(st, &j)) break;
        int stop = fn(ctx, &j);
        store_job_clear(&j);
        if (stop) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_jobs_each(store *s, int state, store_job_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, state < 0 ? "SELECT " JOB_COLUMNS " FROM jobs ORDER BY id"
                                         : "SELECT " JOB_COLUMNS " FROM jobs WHERE state=?1 ORDER BY id");
    if (st && state >= 0) sqlite3_bind_int(st, 1, state);
    return each_job(st, fn, ctx);
}

int store_jobs_page(store *s, uint64_t after_id, unsigned limit, store_job_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT " JOB_COLUMNS " FROM jobs WHERE id>?1 ORDER BY id LIMIT ?2");
    if (st) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)after_id);
        sqlite3_bind_int(st, 2, (int)limit);
    }
    return each_job(st, fn, ctx);
}

int store_idlist_push(store_idlist *l, uint64_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        uint64_t *ids = realloc(l->ids, cap * sizeof *ids);
        if (!ids) return -1;
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return 0;
}

int store_job_ids(store *s, int state, uint64_t after_id, unsigned limit, store_idlist *out)
{
    sqlite3_stmt *st = prep(s, "SELECT id FROM jobs WHERE state=?1 AND id>?2 ORDER BY id LIMIT ?3");
    if (!st) return -1;
    sqlite3_bind_int(st, 1, state);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)after_id);
    sqlite3_bind_int64(st, 3, limit ? (sqlite3_int64)limit : -1);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (store_idlist_push(out, (uint64_t)sqlite3_column_int64(st, 0))) break;
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* ---- layouts: (job, epoch) -> blob ---- */

int store_layout_put(store *s, uint64_t job, uint32_t epoch, const uint8_t *blob, size_t len)
{
    sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO layouts(job, epoch, layout) VALUES(?1,?2,?3)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int(st, 2, (int)epoch);
    sqlite3_bind_blob(st, 3, blob ? (const void *)blob : "", (int)len, SQLITE_TRANSIENT);
    return done(st);
}

static int get_blob(sqlite3_stmt *st, uint8_t **blob, size_t *len)
{
    int rc = sqlite3_step(st), r = -1;
    if (rc == SQLITE_ROW) {
        *len = (size_t)sqlite3_column_bytes(st, 0);
        *blob = malloc(*len ? *len : 1);
        if (*blob) {
            if (*len) memcpy(*blob, sqlite3_column_blob(st, 0), *len);
            r = 0;
        }
    } else if (rc == SQLITE_DONE) {
        r = 1;
    }
    sqlite3_finalize(st);
    return r;
}

int store_layout_get(store *s, uint64_t job, uint32_t epoch, uint8_t **blob, size_t *len)
{
    sqlite3_stmt *st = prep(s, "SELECT layout FROM layouts WHERE job=?1 AND epoch=?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int(st, 2, (int)epoch);
    return get_blob(st, blob, len);
}

/* ---- steps ---- */

static void put_stages(char *out, size_t cap, const double *v, int n)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%.6g", i ? "," : "", v[i]);
}

static int get_stages(const unsigned char *txt, double *v)
{
    int n = 0;
    const char *p = (const char *)txt;
    while (p && *p && n < STORE_MAX_STAGES) {
        char *end;
        v[n++] = strtod(p, &end);
        if (end == p) break;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

int store_step_put(store *s, const store_step *x)
{
    sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO steps(job, iteration, epoch, time_ms, have_job, loss, lr, "
                               "grad_norm, tokens_per_s, step_ms, flops_per_gpu, peak_flops, memory_bytes, bubble, "
                               "transfer, valid_loss, bubble_theory) "
                               "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)");
    if (!st) return -1;
    char b[STORE_MAX_STAGES * 16], t[STORE_MAX_STAGES * 16];
    int n = x->nstages > STORE_MAX_STAGES ? STORE_MAX_STAGES : x->nstages;
    put_stages(b, sizeof b, x->bubble, n);
    put_stages(t, sizeof t, x->transfer, n);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)x->job);
    sqlite3_bind_int64(st, 2, x->iteration);
    sqlite3_bind_int(st, 3, (int)x->epoch);
    sqlite3_bind_int64(st, 4, x->time_ms);
    sqlite3_bind_int(st, 5, x->have_job);
    sqlite3_bind_double(st, 6, x->loss);
    sqlite3_bind_double(st, 7, x->lr);
    sqlite3_bind_double(st, 8, x->grad_norm);
    sqlite3_bind_double(st, 9, x->tokens_per_s);
    sqlite3_bind_double(st, 10, x->step_ms);
    sqlite3_bind_double(st, 11, x->flops_per_gpu);
    sqlite3_bind_double(st, 12, x->peak_flops);
    sqlite3_bind_int64(st, 13, (sqlite3_int64)x->memory_bytes);
    sqlite3_bind_text(st, 14, b, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 15, t, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 16, x->valid_loss);
    sqlite3_bind_double(st, 17, x->bubble_theory);
    return done(st);
}

#define STEP_COLUMNS "job, iteration, epoch, time_ms, have_job, loss, lr, grad_norm, tokens_per_s, step_ms, " \
                     "flops_per_gpu, peak_flops, memory_bytes, bubble, transfer, valid_loss, bubble_theory"

static void read_step(sqlite3_stmt *st, store_step *x)
{
    memset(x, 0, sizeof *x);
    x->job = (uint64_t)sqlite3_column_int64(st, 0);
    x->iteration = sqlite3_column_int64(st, 1);
    x->epoch = (uint32_t)sqlite3_column_int(st, 2);
    x->time_ms = sqlite3_column_int64(st, 3);
    x->have_job = sqlite3_column_int(st, 4);
    x->loss = sqlite3_column_double(st, 5);
    x->lr = sqlite3_column_double(st, 6);
    x->grad_norm = sqlite3_column_double(st, 7);
    x->tokens_per_s = sqlite3_column_double(st, 8);
    x->step_ms = sqlite3_column_double(st, 9);
    x->flops_per_gpu = sqlite3_column_double(st, 10);
    x->peak_flops = sqlite3_column_double(st, 11);
    x->memory_bytes = (uint64_t)sqlite3_column_int64(st, 12);
    x->nstages = get_stages(sqlite3_column_text(st, 13), x->bubble);
    int nt = get_stages(sqlite3_column_text(st, 14), x->transfer);
    for (int i = nt; i < x->nstages; i++) x->transfer[i] = -1;
    x->valid_loss = sqlite3_column_double(st, 15);
    x->bubble_theory = sqlite3_column_double(st, 16);
}

static int one_step(sqlite3_stmt *st, store_step *out)
{
    int rc = sqlite3_step(st), r = -1;
    if (rc == SQLITE_ROW) {
        read_step(st, out);
        r = 0;
    } else if (rc == SQLITE_DONE) {
        r = 1;
    }
    sqlite3_finalize(st);
    return r;
}

int store_step_get(store *s, uint64_t job, int64_t iteration, store_step *out)
{
    sqlite3_stmt *st = prep(s, "SELECT " STEP_COLUMNS " FROM steps WHERE job=?1 AND iteration=?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int64(st, 2, iteration);
    return one_step(st, out);
}

int store_step_latest(store *s, uint64_t job, store_step *out)
{
    sqlite3_stmt *st = prep(s, "SELECT " STEP_COLUMNS " FROM steps WHERE job=?1 ORDER BY iteration DESC LIMIT 1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    return one_step(st, out);
}

int store_step_latest_valid(store *s, uint64_t job, store_step *out)
{
    sqlite3_stmt *st = prep(s, "SELECT " STEP_COLUMNS " FROM steps WHERE job=?1 AND valid_loss>0 "
                               "ORDER BY iteration DESC LIMIT 1");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    return one_step(st, out);
}

int store_steps_each(store *s, uint64_t job, int64_t after, unsigned limit, store_step_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT " STEP_COLUMNS " FROM steps WHERE job=?1 AND iteration>?2 "
                               "ORDER BY iteration LIMIT ?3");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int(st, 3, (int)(limit ? limit : 10000));
    int rc;
    store_step x;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        read_step(st, &x);
        if (fn(ctx, &x)) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_steps_count(store *s, uint64_t job, int64_t before, int64_t *n)
{
    sqlite3_stmt *st = prep(s, "SELECT count(*) FROM steps WHERE job=?1 AND iteration<?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int64(st, 2, before);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

int store_steps_thin(store *s, uint64_t job, int64_t before)
{
    sqlite3_stmt *st = prep(s, "DELETE FROM steps WHERE job=?1 AND iteration IN (SELECT iteration FROM "
                               "(SELECT iteration, row_number() OVER (ORDER BY iteration) AS rn FROM steps "
                               "WHERE job=?1 AND iteration<?2) WHERE rn % 2 = 0)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int64(st, 2, before);
    return done(st);
}

/* ---- rank exits ---- */

int store_exit_put(store *s, const store_exit *e)
{
    sqlite3_stmt *st = prep(s, "INSERT OR IGNORE INTO rank_exits(job, epoch, rank, pid, exit_status, term_signal, "
                               "stopped, time_ms, node, log_tail) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)e->job);
    sqlite3_bind_int(st, 2, (int)e->epoch);
    sqlite3_bind_int(st, 3, e->rank);
    sqlite3_bind_int(st, 4, e->pid);
    sqlite3_bind_int(st, 5, e->exit_status);
    sqlite3_bind_int(st, 6, e->term_signal);
    sqlite3_bind_int(st, 7, e->stopped);
    sqlite3_bind_int64(st, 8, e->time_ms);
    sqlite3_bind_text(st, 9, e->node, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 10, e->log_tail, -1, SQLITE_TRANSIENT);
    if (done(st)) return -1;
    return sqlite3_changes(s->db) == 1;
}

int store_exits_each(store *s, uint64_t job, uint32_t epoch, store_exit_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT rank, pid, exit_status, term_signal, stopped, time_ms, node, log_tail "
                               "FROM rank_exits WHERE job=?1 AND epoch=?2 ORDER BY time_ms, rowid");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int(st, 2, (int)epoch);
    int rc;
    store_exit e;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        memset(&e, 0, sizeof e);
        e.job = job;
        e.epoch = epoch;
        e.rank = sqlite3_column_int(st, 0);
        e.pid = sqlite3_column_int(st, 1);
        e.exit_status = sqlite3_column_int(st, 2);
        e.term_signal = sqlite3_column_int(st, 3);
        e.stopped = sqlite3_column_int(st, 4);
        e.time_ms = sqlite3_column_int64(st, 5);
        text(e.node, sizeof e.node, sqlite3_column_text(st, 6));
        text(e.log_tail, sizeof e.log_tail, sqlite3_column_text(st, 7));
        if (fn(ctx, &e)) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_exits_count(store *s, uint64_t job, uint32_t epoch, int *total, int *ok, int *saved)
{
    sqlite3_stmt *st = prep(s, "SELECT count(*), coalesce(sum(exit_status = 0 AND term_signal = 0), 0), "
                               "coalesce(sum(exit_status = ?3 AND term_signal = 0), 0) "
                               "FROM rank_exits WHERE job=?1 AND epoch=?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int(st, 2, (int)epoch);
    sqlite3_bind_int(st, 3, SUP_EXIT_SAVED);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *total = sqlite3_column_int(st, 0);
        *ok = sqlite3_column_int(st, 1);
        if (saved) *saved = sqlite3_column_int(st, 2);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

/* ---- restarts ---- */

int store_restart_put(store *s, const store_restart *r)
{
    sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO restarts(job, epoch, cause, detail, node, rank, fault_ms, "
                               "detected_ms, running_ms, reached, from_iteration, steps_recomputed, dp, counted) "
                               "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)r->job);
    sqlite3_bind_int(st, 2, (int)r->epoch);
    sqlite3_bind_text(st, 3, r->cause, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, r->detail, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, r->node, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 6, r->rank);
    sqlite3_bind_int64(st, 7, r->fault_ms);
    sqlite3_bind_int64(st, 8, r->detected_ms);
    sqlite3_bind_int64(st, 9, r->running_ms);
    sqlite3_bind_int64(st, 10, r->reached);
    sqlite3_bind_int64(st, 11, r->from_iteration);
    sqlite3_bind_int64(st, 12, r->steps_recomputed);
    sqlite3_bind_int(st, 13, r->dp);
    sqlite3_bind_int(st, 14, r->counted);
    return done(st);
}

#define RESTART_COLUMNS "job, epoch, cause, detail, node, rank, fault_ms, detected_ms, running_ms, reached, " \
                        "from_iteration, steps_recomputed, dp, counted"

static void read_restart(sqlite3_stmt *st, store_restart *r)
{
    memset(r, 0, sizeof *r);
    r->job = (uint64_t)sqlite3_column_int64(st, 0);
    r->epoch = (uint32_t)sqlite3_column_int(st, 1);
    text(r->cause, sizeof r->cause, sqlite3_column_text(st, 2));
    text(r->detail, sizeof r->detail, sqlite3_column_text(st, 3));
    text(r->node, sizeof r->node, sqlite3_column_text(st, 4));
    r->rank = sqlite3_column_int(st, 5);
    r->fault_ms = sqlite3_column_int64(st, 6);
    r->detected_ms = sqlite3_column_int64(st, 7);
    r->running_ms = sqlite3_column_int64(st, 8);
    r->reached = sqlite3_column_int64(st, 9);
    r->from_iteration = sqlite3_column_int64(st, 10);
    r->steps_recomputed = sqlite3_column_int64(st, 11);
    r->dp = sqlite3_column_int(st, 12);
    r->counted = sqlite3_column_int(st, 13);
}

int store_restart_get(store *s, uint64_t job, uint32_t epoch, store_restart *out)
{
    sqlite3_stmt *st = prep(s, "SELECT " RESTART_COLUMNS " FROM restarts WHERE job=?1 AND epoch=?2");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    sqlite3_bind_int(st, 2, (int)epoch);
    int rc = sqlite3_step(st), r = rc == SQLITE_DONE ? 1 : -1;
    if (rc == SQLITE_ROW) {
        read_restart(st, out);
        r = 0;
    }
    sqlite3_finalize(st);
    return r;
}

int store_restarts_each(store *s, uint64_t job, store_restart_fn fn, void *ctx)
{
    sqlite3_stmt *st = prep(s, "SELECT " RESTART_COLUMNS " FROM restarts WHERE job=?1 ORDER BY epoch");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    int rc;
    store_restart r;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        read_restart(st, &r);
        if (fn(ctx, &r)) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_restarts_counted(store *s, uint64_t job, int *n)
{
    sqlite3_stmt *st = prep(s, "SELECT count(*) FROM restarts WHERE job=?1 AND counted");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}
