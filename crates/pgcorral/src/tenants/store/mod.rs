//! The tenant registry in PostgreSQL: its schema (created and migrated, versioned), tenants
//! read and written, and the changes other nodes make, heard through LISTEN/NOTIFY.
//!
//! Submodules: `schema` (migrations and the rows' mapping to [`Tenant`]), `watch` (the
//! listening connection and the notifications' payloads).

pub mod leases;
pub mod nodes;
mod schema;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Mutex};
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config, GenericClient, NoTls};

use super::model::{HostPort, Mode, Tenant, TenantUser};

/// How long one call may take, connecting included; past it the connection is dropped (it may
/// be stuck in a transaction) and the next call connects again.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The connect timeout when the connection string sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the registry could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The registry cannot be reached or failed; the message is safe to log.
    #[error("tenant registry: {0}")]
    Unavailable(String),
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    Created,
    Updated,
}

/// A change to one tenant, made by any node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The tenant was created, changed or deleted: read it again.
    Tenant(String),
    /// The API asked every node to close the tenant's clients and servers.
    Terminate(String),
    /// Notifications may have been missed (the listening connection was lost and is back, or
    /// the periodic re-read is due): read every loaded tenant again.
    All,
}

/// A handle on the registry; cheap to clone, reconnects by itself.
///
/// One connection serves every clone, one call at a time (the registry is read when tenants
/// load and written by the API, never per query). No TLS yet: a connection string asking for
/// it (`sslmode=require`) is refused rather than quietly served in plain text.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// What the clones share.
struct Inner {
    config: Config,
    /// The connection's password, kept out of every message.
    redact: Redact,
    /// The connection, `None` until the next call connects (again).
    client: Mutex<Option<Client>>,
}

/// Why an operation failed, before it becomes a [`StoreError`].
enum OpError {
    Pg(tokio_postgres::Error),
    /// The registry holds (or was given) what pgcorral's model cannot take.
    Bad(String),
}

impl From<tokio_postgres::Error> for OpError {
    /// A client error.
    fn from(e: tokio_postgres::Error) -> Self {
        OpError::Pg(e)
    }
}

impl fmt::Debug for Store {
    /// The handle without its configuration (which holds the password).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Connects (libpq connection string, `key=value` or URL), creating or migrating the
    /// schema. `sslmode=require` is refused: the registry is reached without TLS for now.
    pub async fn open(conninfo: &str) -> Result<Store, StoreError> {
        let mut config: Config = conninfo
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("connection string: {}", describe(&e))))?;
        match config.get_ssl_mode() {
            SslMode::Disable | SslMode::Prefer => {}
            _ => {
                return Err(StoreError::Unavailable(
                    "connection string: sslmode=require is not supported (the registry is \
                     reached without TLS); set sslmode=disable"
                        .into(),
                ))
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("pgcorral");
        }
        let redact = Redact::of(&config);
        let store = Store {
            inner: Arc::new(Inner {
                config,
                redact,
                client: Mutex::new(None),
            }),
        };
        store
            .call("migrating the schema", async |c| schema::migrate(c).await)
            .await?;
        Ok(store)
    }

    /// The tenant named `external_id`, with its users.
    pub async fn get(&self, external_id: &str) -> Result<Option<Tenant>, StoreError> {
        self.call("get", async |c| {
            schema::select_one(c, "WHERE t.external_id = $1", &[&external_id]).await
        })
        .await
    }

    /// The tenant whose `sni_hostname` is `host` (case-insensitive).
    pub async fn by_sni(&self, host: &str) -> Result<Option<Tenant>, StoreError> {
        self.call("by_sni", async |c| {
            schema::select_one(
                c,
                "WHERE lower(t.sni_hostname) = lower($1) AND t.sni_hostname IS NOT NULL",
                &[&host],
            )
            .await
        })
        .await
    }

    /// Creates or replaces the tenant and its users in one transaction, telling every node.
    /// Its ban (`banned_at`, `ban_reason`) and timestamps are the registry's: [`Store::set_ban`]
    /// changes the ban, and put leaves it as it is.
    pub async fn put(&self, tenant: &Tenant) -> Result<Put, StoreError> {
        self.call("put", async |c| {
            let tx = c.transaction().await?;
            let version = schema::upsert(&tx, tenant).await?;
            schema::replace_users(&tx, tenant).await?;
            notify(&tx, &Change::Tenant(tenant.external_id.clone())).await?;
            tx.commit().await?;
            Ok(if version == 1 {
                Put::Created
            } else {
                Put::Updated
            })
        })
        .await
    }

    /// Deletes the tenant and its users; false when there was none.
    pub async fn delete(&self, external_id: &str) -> Result<bool, StoreError> {
        self.call("delete", async |c| {
            let tx = c.transaction().await?;
            let n = tx
                .execute(
                    "DELETE FROM pgcorral.tenants WHERE external_id = $1",
                    &[&external_id],
                )
                .await?;
            if n > 0 {
                notify(&tx, &Change::Tenant(external_id.to_owned())).await?;
            }
            tx.commit().await?;
            Ok(n > 0)
        })
        .await
    }

    /// Up to `limit` tenants whose ids sort (bytewise) after `after`, in that order.
    pub async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<Tenant>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call("list", async |c| match after {
            Some(after) => {
                let tail = "WHERE t.external_id > $1 ORDER BY t.external_id LIMIT $2";
                schema::select(c, tail, &[&after, &limit]).await
            }
            None => schema::select(c, "ORDER BY t.external_id LIMIT $1", &[&limit]).await,
        })
        .await
    }

    /// Bans the tenant (`Some(reason)`: `banned_at` now) or lifts its ban (`None`), telling
    /// every node; the tenant after, or `None` when there is no such tenant.
    pub async fn set_ban(
        &self,
        external_id: &str,
        reason: Option<&str>,
    ) -> Result<Option<Tenant>, StoreError> {
        self.call("set_ban", async |c| {
            let tx = c.transaction().await?;
            let n = tx
                .execute(
                    "UPDATE pgcorral.tenants
                     SET banned_at = CASE WHEN $2::text IS NULL THEN NULL ELSE now() END,
                         ban_reason = $2, version = version + 1, updated_at = now()
                     WHERE external_id = $1",
                    &[&external_id, &reason],
                )
                .await?;
            if n == 0 {
                return Ok(None);
            }
            notify(&tx, &Change::Tenant(external_id.to_owned())).await?;
            let after =
                schema::select_one(&tx, "WHERE t.external_id = $1", &[&external_id]).await?;
            tx.commit().await?;
            Ok(after)
        })
        .await
    }

    /// Asks every node (this one included) to close the tenant's clients and servers.
    pub async fn terminate(&self, external_id: &str) -> Result<(), StoreError> {
        self.call("terminate", async |c| {
            notify(c, &Change::Terminate(external_id.to_owned())).await
        })
        .await
    }

    /// Checks that the registry answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.call("ping", async |c| Ok(c.batch_execute("SELECT 1").await?))
            .await
    }

    /// Changes made by any node, on a connection of their own: [`Change::All`] first and
    /// after every reconnection, and every `reread` (zero: never) as a safety net. Spawns a
    /// task on the caller's (tokio) runtime that ends when the receiver is dropped.
    pub fn watch(&self, reread: Duration) -> mpsc::Receiver<Change> {
        watch::spawn(self.inner.config.clone(), self.inner.redact.clone(), reread)
    }

    /// A handle on the same registry with a connection of its own (for calls that must not
    /// wait behind others: the fleet's leases).
    pub fn separate(&self) -> Store {
        Store {
            inner: Arc::new(Inner {
                config: self.inner.config.clone(),
                redact: self.inner.redact.clone(),
                client: Mutex::new(None),
            }),
        }
    }

    /// Runs `op` on the connection (connecting first if there is none or it was lost), one
    /// call at a time, within [`CALL_TIMEOUT`].
    async fn call<T>(
        &self,
        what: &str,
        op: impl AsyncFnOnce(&mut Client) -> Result<T, OpError>,
    ) -> Result<T, StoreError> {
        self.call_within(what, CALL_TIMEOUT, op).await
    }

    /// [`Store::call`] within `limit`.
    async fn call_within<T>(
        &self,
        what: &str,
        limit: Duration,
        op: impl AsyncFnOnce(&mut Client) -> Result<T, OpError>,
    ) -> Result<T, StoreError> {
        let mut slot = self.inner.client.lock().await;
        let attempt = tokio::time::timeout(limit, async {
            if slot.as_ref().is_none_or(Client::is_closed) {
                *slot = None;
                *slot = Some(self.connect().await?);
            }
            match slot.as_mut() {
                Some(client) => op(client).await,
                None => Err(OpError::Bad("no connection".into())),
            }
        })
        .await;
        let e = match attempt {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(OpError::Pg(e))) => describe(&e),
            Ok(Err(OpError::Bad(e))) => e,
            Err(_) => {
                *slot = None;
                format!("no answer within {limit:?}")
            }
        };
        Err(StoreError::Unavailable(
            self.inner.redact.text(&format!("{what}: {e}")),
        ))
    }

    /// A new connection, its I/O driven by a task on the caller's runtime.
    #[allow(clippy::disallowed_methods)] // the registry's client runs on the caller's runtime (the main thread's), not a worker
    async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.inner.config.connect(NoTls).await?;
        let redact = self.inner.redact.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                let e = redact.text(&describe(&e));
                tracing::warn!("tenant registry: connection lost: {e}");
            }
        });
        Ok(client)
    }
}

/// Tells every listening node of `change`, at the commit of `c`'s transaction if it is one.
async fn notify(c: &impl GenericClient, change: &Change) -> Result<(), OpError> {
    let payload = watch::payload(change);
    c.execute(
        "SELECT pg_catalog.pg_notify($1, $2)",
        &[&watch::CHANNEL, &payload],
    )
    .await?;
    Ok(())
}

/// A client error as text: a server's error by severity, SQLSTATE and message (never its
/// detail, which can quote a row), another with its cause.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Takes the connection's password out of text.
#[derive(Clone)]
struct Redact(Option<String>);

impl Redact {
    /// The redactor of `config`'s password.
    fn of(config: &Config) -> Redact {
        let password = config.get_password().map(String::from_utf8_lossy);
        Redact(password.filter(|p| !p.is_empty()).map(|p| p.into_owned()))
    }

    /// `text` with every occurrence of the password replaced.
    fn text(&self, text: &str) -> String {
        match &self.0 {
            Some(p) if text.contains(p.as_str()) => text.replace(p.as_str(), "********"),
            _ => text.to_owned(),
        }
    }
}
