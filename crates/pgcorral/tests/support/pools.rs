//! Helpers for the pool tests (pools_*.rs): configs of databases and users, server connections
//! counted and awaited on the PostgreSQL side (pg_stat_activity), and clients running
//! transactions that hold their server for a while.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::*;

/// A pgcorral configuration: `[general]` (trust, port 0) plus `general` lines, then `rest`
/// (database and user sections).
pub fn toml(general: &str, rest: &str) -> String {
    format!("[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n{rest}")
}

/// A `[databases.NAME]` section pointing at `pg`, plus `extra` lines. `name` is written as
/// given, so quote it (`"\"*\""`) when it needs quoting.
pub fn db(pg: &Postgres, name: &str, extra: &str) -> String {
    format!(
        "[databases.{name}]\nhost = \"127.0.0.1\"\nport = {}\n{extra}\n\n",
        pg.port
    )
}

/// A `[users.NAME]` section with `extra` lines.
pub fn user(name: &str, extra: &str) -> String {
    format!("[users.{name}]\n{extra}\n\n")
}

/// `pg.sql` without blocking the runtime.
pub fn sql(pg: &Postgres, db: &str, q: &str) -> String {
    blocking(|| pg.sql(db, q))
}

/// `pg_stat_activity` condition for the backends of `user` on `db`.
pub fn of(user: &str, db: &str) -> String {
    format!("usename = '{user}' AND datname = '{db}'")
}

/// Client backends matching `cond` (a condition over pg_stat_activity), the asking one excluded.
pub async fn count(admin: &Client, cond: &str) -> i64 {
    admin
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND {cond}"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `count(cond) == want`, failing after `limit`.
pub async fn wait_count(admin: &Client, cond: &str, want: i64, limit: Duration, what: &str) {
    let start = Instant::now();
    loop {
        let n = count(admin, cond).await;
        if n == want {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {n} server connections ({cond}) after {limit:?}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` clients of `user` on `db`, connected one after another.
pub async fn clients(pooler: &Pooler, user: &str, db: &str, n: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            within(
                Duration::from_secs(10),
                "connect through pgcorral",
                pooler.connect(user, None, db),
            )
            .await,
        );
    }
    out
}

/// One transaction that holds its server for `hold` (idle in transaction on the client's side);
/// the backend pid it ran on.
pub async fn hold_transaction(c: &Client, hold: Duration, who: &str) -> i32 {
    within(Duration::from_secs(30), who, async {
        c.batch_execute("BEGIN")
            .await
            .unwrap_or_else(|e| panic!("{who}: BEGIN: {e}"));
        let p = backend_pid(c).await;
        tokio::time::sleep(hold).await;
        c.batch_execute("COMMIT")
            .await
            .unwrap_or_else(|e| panic!("{who}: COMMIT: {e}"));
        p
    })
    .await
}

/// All `clients` at once, each running `rounds` transactions that hold their server for `hold`.
/// Gives the clients back, with every backend pid the transactions ran on.
pub async fn transactions(
    clients: Vec<Client>,
    rounds: usize,
    hold: Duration,
) -> (Vec<Client>, HashSet<i32>) {
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::spawn(async move {
                let mut pids = Vec::new();
                for r in 0..rounds {
                    pids.push(hold_transaction(&c, hold, &format!("client {i} round {r}")).await);
                }
                (c, pids)
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut back = Vec::new();
    for t in tasks {
        let (c, pids) = within(Duration::from_secs(120), "transactions", t)
            .await
            .unwrap();
        all.extend(pids);
        back.push(c);
    }
    (back, all)
}
