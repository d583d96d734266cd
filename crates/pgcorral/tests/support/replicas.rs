//! Real streaming replication for tests: a primary, hot standbys cloned by pg_basebackup, and
//! helpers to pause replay, promote, stop, start and kill servers.

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{append, chown_postgres, pg_bindir, pg_command, run_ok, scratch_root};
use super::{watchdog, PgOptions, Postgres};

/// How long the waits here may take before the test fails instead of hanging.
const WAIT: Duration = Duration::from_secs(30);

/// A primary and its streaming replicas (hot standbys, asynchronous, no replication slots).
/// Fields drop in order: the replicas stop before the primary.
pub struct Replicated {
    pub replicas: Vec<Postgres>,
    pub primary: Postgres,
}

impl Replicated {
    /// Starts a primary and `n` replicas streaming from it; each replica is up and accepting
    /// read-only connections (not necessarily caught up: see `wait_caught_up`) on return.
    pub fn start(n: usize) -> Replicated {
        // Replicas inherit this postgresql.conf; without the short retry interval, a standby
        // that lost its primary (killed, restarted) waits 5 s before reconnecting.
        let primary = Postgres::start_with(PgOptions {
            conf: "wal_level = replica\nmax_wal_senders = 10\nwal_keep_size = '128MB'\n\
                   hot_standby = on\nhot_standby_feedback = on\n\
                   wal_retrieve_retry_interval = '100ms'\n"
                .into(),
            ..PgOptions::default()
        });
        append(
            &primary.dir.join("pg_hba.conf"),
            "host replication postgres 127.0.0.1/32 trust\n",
        );
        // PostgreSQL 15's postmaster reloads pg_hba.conf in its SIGHUP handler, before it
        // accepts the next connection: pg_basebackup below sees the new line.
        primary.sql("postgres", "SELECT pg_reload_conf()");
        // Cloned side by side: each pg_basebackup takes about half a second.
        let replicas = std::thread::scope(|s| {
            let clones: Vec<_> = (0..n)
                .map(|_| s.spawn(|| clone_replica(&primary)))
                .collect();
            // A failed clone's own panic message, not "Any".
            let join = |c: std::thread::ScopedJoinHandle<'_, Postgres>| {
                c.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            };
            clones.into_iter().map(join).collect()
        });
        Replicated { replicas, primary }
    }

    /// Waits until every replica that is running, still in recovery and not paused has replayed
    /// the primary's WAL up to the primary's current LSN (read now). Paused, stopped and
    /// promoted replicas are skipped; use `wait_replica_caught_up` to insist on one.
    pub fn wait_caught_up(&self) {
        let lsn = current_lsn(&self.primary);
        for r in self.replicas.iter().filter(|r| is_running(r)) {
            wait_replayed(
                r,
                &lsn,
                "NOT pg_is_in_recovery() OR pg_is_wal_replay_paused()",
            );
        }
    }

    /// Waits until `replica` has replayed the primary's WAL up to the primary's current LSN;
    /// panics after 30 s (e.g. when its replay is paused).
    pub fn wait_replica_caught_up(&self, replica: &Postgres) {
        wait_replayed(replica, &current_lsn(&self.primary), "false");
    }
}

/// One replica: a pg_basebackup of `primary` into a fresh directory, on its own port, started.
fn clone_replica(primary: &Postgres) -> Postgres {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = scratch_root().join(format!("replica-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    chown_postgres(&dir);
    // A data directory must not be readable by others.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    watchdog(&dir, Some(&pg_bindir().join("pg_ctl")));
    // -R writes standby.signal and primary_conninfo (this conninfo: pg_stat_replication shows
    // the application_name); -c fast: don't wait for a spread checkpoint.
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres application_name=replica{n}",
        primary.port
    );
    let mut c = pg_command("pg_basebackup");
    c.args(["-d", &conninfo, "-R", "-X", "stream", "-c", "fast"])
        .arg("--no-sync")
        .arg("-D")
        .arg(&dir);
    run_ok(c, "pg_basebackup");
    // The copy carries the primary's pg_ctl log; start this server's own.
    std::fs::write(dir.join("log"), "").unwrap();
    // The primary's `port` line is in the copied postgresql.conf; ours comes after it.
    let mut replica = Postgres { port: 0, dir };
    replica.start_on_a_free_port();
    replica
}

/// `pg_current_wal_lsn()` of a primary.
fn current_lsn(primary: &Postgres) -> String {
    primary.sql("postgres", "SELECT pg_current_wal_lsn()")
}

/// Polls until `replica` has replayed up to `lsn` or the SQL condition `skip` holds there.
fn wait_replayed(replica: &Postgres, lsn: &str, skip: &str) {
    let sql =
        format!("SELECT coalesce(pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn, false) OR {skip}");
    wait_for(
        || replica.sql("postgres", &sql) == "t",
        || {
            let state = replica.sql(
                "postgres",
                "SELECT coalesce(pg_last_wal_replay_lsn()::text, 'nothing') || CASE \
                 WHEN pg_is_in_recovery() THEN ', replay ' || pg_get_wal_replay_pause_state() \
                 ELSE ', promoted' END",
            );
            format!(
                "replica on port {} did not replay up to {lsn} (replayed {state})",
                replica.port
            )
        },
    );
}

/// Polls `done` every 25 ms; panics with `why()` after 30 s.
fn wait_for(mut done: impl FnMut() -> bool, why: impl FnOnce() -> String) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        if Instant::now() > deadline {
            panic!("after {WAIT:?}: {}", why());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Pauses WAL replay on a replica and waits until it has taken effect, so nothing the primary
/// writes afterwards becomes visible there until `resume_replay`.
pub fn pause_replay(replica: &Postgres) {
    replica.sql("postgres", "SELECT pg_wal_replay_pause()");
    let state = "SELECT pg_get_wal_replay_pause_state()";
    wait_for(
        || replica.sql("postgres", state) == "paused",
        || format!("replay on port {} did not pause", replica.port),
    );
}

pub fn resume_replay(replica: &Postgres) {
    replica.sql("postgres", "SELECT pg_wal_replay_resume()");
}

/// Promotes a replica to a primary and waits until it accepts writes.
pub fn promote(replica: &Postgres) {
    replica.pg_ctl("promote");
    wait_for(
        || !is_in_recovery(replica),
        || format!("replica on port {} is still in recovery", replica.port),
    );
}

/// Fast shutdown (sessions are terminated, a shutdown checkpoint is written), waited for.
pub fn stop(pg: &Postgres) {
    pg.pg_ctl("stop");
}

/// Starts a stopped or killed server and waits until it accepts connections (a standby's
/// read-only ones once it is consistent).
pub fn start(pg: &Postgres) {
    pg.pg_ctl("start");
}

/// Immediate shutdown: a crash, as far as the server's data is concerned.
pub fn kill(pg: &Postgres) {
    let mut c = pg_command("pg_ctl");
    c.arg("-D")
        .arg(&pg.dir)
        .args(["stop", "-m", "immediate", "-w", "-t", "60"]);
    run_ok(c, "pg_ctl stop -m immediate");
}

pub fn is_in_recovery(pg: &Postgres) -> bool {
    pg.sql("postgres", "SELECT pg_is_in_recovery()") == "t"
}

/// Whether `pg_ctl status` finds the server running.
pub fn is_running(pg: &Postgres) -> bool {
    let mut c = pg_command("pg_ctl");
    c.arg("-D").arg(&pg.dir).arg("status");
    c.output().map(|o| o.status.success()).unwrap_or(false)
}
