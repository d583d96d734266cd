//! auth_query cannot be steered by what a database's owner creates: an unprivileged owner who
//! puts a `public.pg_authid` of their own in their database and sets the database's
//! `search_path` to read it first does not log in as `postgres` with the password they chose
//! (the default query names `pg_catalog.pg_authid`, and every lookup, the user's own query
//! too, runs with `search_path = pg_catalog, pg_temp`), while the real password does; with
//! `auth_dbname` the lookup runs in that database.

mod support;

use support::{blocking, connect, db_message, sqlstate, PgOptions, Pooler, Postgres};

/// A server checking passwords of every role but `postgres` (trusted, so that pgcorral's
/// login as `postgres` stands for whatever the lookup let in), with `postgres`'s real
/// password, a superuser `lookup` to run the lookups, and a database `owned` whose owner
/// `mallory` (no other privilege) has planted a catalog of their own.
fn server() -> Postgres {
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "md5",
            ..PgOptions::default()
        })
    });
    blocking(|| {
        pg.sql(
            "postgres",
            "SET password_encryption = 'md5';
             ALTER ROLE postgres PASSWORD 'real pw';
             CREATE ROLE lookup LOGIN SUPERUSER PASSWORD 'lookup pw';
             CREATE ROLE mallory LOGIN PASSWORD 'mallory pw';",
        );
        pg.sql("postgres", "CREATE DATABASE owned OWNER mallory");
        // What the owner may do: a table named like the catalog in `public` (theirs), read
        // before pg_catalog by the database's search_path.
        pg.sql(
            "owned",
            "SET ROLE mallory;
             CREATE TABLE public.pg_authid (rolname name, rolpassword text,
                 rolvaliduntil timestamptz, rolcanlogin bool);
             INSERT INTO public.pg_authid
                 VALUES ('postgres', 'md5' || md5('fake pw' || 'postgres'), NULL, true);
             ALTER DATABASE owned SET search_path = public, pg_catalog;",
        );
    });
    // The plant works on a session that takes the database's search_path.
    let seen = blocking(|| {
        pg.sql(
            "owned",
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'",
        )
    });
    assert!(seen.starts_with("md5"), "{seen}");
    pg
}

/// pgcorral looking up every login as `lookup`: database `owned` with the default query, and
/// with the user's unqualified query; `owned_via_postgres` looking up in `postgres`
/// (auth_dbname) with a query that answers only there.
async fn pooler(pg: &Postgres) -> Pooler {
    let p = pg.port;
    Pooler::start(&format!(
        "[general]\nauth_type = \"md5\"\nauth_user = \"lookup\"\n\
         [users.lookup]\npassword = \"lookup pw\"\n\
         [databases.owned]\nhost = \"127.0.0.1\"\nport = {p}\n\
         [databases.users_query]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"owned\"\n\
         auth_query = \"SELECT rolname, rolpassword FROM pg_authid WHERE rolname = $1\"\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {p}\n\
         [databases.owned_via_postgres]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"owned\"\n\
         auth_dbname = \"postgres\"\n\
         auth_query = \"SELECT rolname, rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1 \
         AND pg_catalog.current_database() = 'postgres'\"\n\
         [databases.owned_in_itself]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"owned\"\n\
         auth_query = \"SELECT rolname, rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1 \
         AND pg_catalog.current_database() = 'postgres'\"\n"
    ))
    .await
}

/// Logs in as `postgres` and returns `current_user`, or the error's (SQLSTATE, message).
async fn login(port: u16, db: &str, password: &str) -> Result<String, (String, String)> {
    match connect(port, "postgres", Some(password), db).await {
        Ok(c) => {
            let row = c.query_one("SELECT current_user::text", &[]).await;
            Ok(row.map(|r| r.get(0)).unwrap_or_else(|e| format!("{e}")))
        }
        Err(e) => Err((sqlstate(&e), db_message(&e))),
    }
}

fn refused() -> Result<String, (String, String)> {
    Err((
        "28P01".into(),
        "password authentication failed for user \"postgres\"".into(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_owner_s_catalog_does_not_answer_the_lookup() {
    let pg = server();
    let pooler = pooler(&pg).await;
    let port = pooler.port();
    for db in ["owned", "users_query"] {
        assert_eq!(login(port, db, "fake pw").await, refused(), "{db}");
        assert_eq!(
            login(port, db, "real pw").await,
            Ok("postgres".into()),
            "{db}"
        );
    }
    // auth_dbname: the lookup runs there (the query answers only in `postgres`), and not in
    // the client's database without it.
    assert_eq!(
        login(port, "owned_via_postgres", "real pw").await,
        Ok("postgres".into())
    );
    assert_eq!(
        login(port, "owned_via_postgres", "fake pw").await,
        refused()
    );
    assert_eq!(login(port, "owned_in_itself", "real pw").await, refused());
    pooler.shutdown().await;
}
