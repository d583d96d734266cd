//! Helpers of the tenant tests (`tenants.rs`, `tenant_fleet_api.rs`): a login through a node
//! that answers with the server's message, and polling until a change is seen.

use std::time::{Duration, Instant};

use super::{db_message, pg_config};

/// Connects to 127.0.0.1:`port` as `user` with `password` on `db` (with `options`), or the
/// server's message and the error.
pub async fn login_to(
    port: u16,
    user: &str,
    password: &str,
    db: &str,
    options: Option<&str>,
) -> Result<tokio_postgres::Client, String> {
    let mut cfg = pg_config(port, user, db);
    cfg.password(password);
    if let Some(o) = options {
        cfg.options(o);
    }
    match cfg.connect(tokio_postgres::NoTls).await {
        Ok((client, conn)) => {
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(client)
        }
        Err(e) => Err(format!("{} {e}", db_message(&e))),
    }
}

/// Polls `f` every 20 ms until it is true; the time it took, or a failure after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {limit:?}");
}
