//! The two sides of a comparison: one PostgreSQL of the test's own, reset to the same state
//! before each run, reached directly and through a fresh pgcorral in the case's pool mode.

use std::time::Duration;

use super::compare::{compare, Difference};

use super::run::{run, Timing, Transcript};
use super::script::{Case, Mode};
use crate::support::wire::Wire;
use crate::support::{Pooler, Postgres};

/// The database every case runs in.
const DB: &str = "diff";

/// Roles scripts may switch to (created once; global objects survive the resets).
const GLOBAL_SETUP: &str = "CREATE ROLE r1; CREATE ROLE r2; \
     CREATE DATABASE diff";

/// Run as superuser before each side: the schemas scripts use, empty.
const RESET: &str = "DROP SCHEMA IF EXISTS public, s1, s2 CASCADE; \
     CREATE SCHEMA public; CREATE SCHEMA s1; CREATE SCHEMA s2; \
     GRANT ALL ON SCHEMA public, s1, s2 TO PUBLIC";

pub struct Harness {
    pub pg: Postgres,
    control: Wire,
}

impl Harness {
    pub async fn start() -> Harness {
        let pg = Postgres::start();
        let mut c = Wire::connect(pg.port, "postgres", "postgres").await;
        for sql in GLOBAL_SETUP.split("; ") {
            expect_ok(&mut c, sql).await;
        }
        let control = Wire::connect(pg.port, "postgres", DB).await;
        Harness { pg, control }
    }

    /// One Query (one transaction, one round trip): the reset and the case's setup.
    async fn reset(&mut self, case: &Case) {
        let mut sql = String::from(RESET);
        for s in &case.setup {
            sql.push_str(";\n");
            sql.push_str(s);
        }
        expect_ok(&mut self.control, &sql).await;
    }

    /// The reference run, straight to PostgreSQL.
    pub async fn direct(&mut self, case: &Case, timing: Timing) -> Transcript {
        let t0 = std::time::Instant::now();
        self.reset(case).await;
        let t1 = t0.elapsed();
        let t = run(case, self.pg.port, DB, timing, None).await;
        if std::env::var("DIFF_TRACE").is_ok() {
            eprintln!("reset {t1:?} direct {:?}", t0.elapsed() - t1);
        }
        t
    }

    /// The same case through a new pgcorral in `mode`.
    pub async fn pooled(
        &mut self,
        case: &Case,
        mode: Mode,
        timing: Timing,
        reference: &Transcript,
    ) -> Transcript {
        self.reset(case).await;
        let size = if mode == Mode::Session {
            case.clients
        } else {
            case.pool_size
        };
        let toml = format!(
            "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"{}\"\n\
             default_pool_size = {size}\nshutdown_timeout = 2000\n\n\
             [databases.{DB}]\nhost = \"127.0.0.1\"\nport = {}\n",
            mode.name(),
            self.pg.port
        );
        let t0 = std::time::Instant::now();
        let pooler = Pooler::start(&toml).await;
        let t1 = t0.elapsed();
        let counts: Vec<usize> = reference.notifications.iter().map(Vec::len).collect();
        let t = run(case, pooler.port(), DB, timing, Some(&counts)).await;
        let t2 = t0.elapsed();
        pooler.shutdown().await;
        if std::env::var("DIFF_TRACE").is_ok() {
            eprintln!(
                "start {t1:?} run {:?} shutdown {:?}",
                t2 - t1,
                t0.elapsed() - t2
            );
        }
        t
    }

    /// Runs `case` directly once and through pgcorral in each of `modes` it allows; the
    /// differences per mode.
    pub async fn check(
        &mut self,
        case: &Case,
        modes: &[Mode],
        timing: (Timing, Timing),
    ) -> Vec<(Mode, Vec<Difference>)> {
        let direct = self.direct(case, timing.0).await;
        let mut out = Vec::new();
        for &mode in modes.iter().filter(|m| case.modes.contains(m)) {
            let pooled = self.pooled(case, mode, timing.1, &direct).await;
            if std::env::var("DIFF_SHOW").is_ok() {
                eprintln!(
                    "{}direct:\n{}",
                    case.listing(),
                    super::compare::dump(case, &direct)
                );
                eprintln!(
                    "{} mode:\n{}",
                    mode.name(),
                    super::compare::dump(case, &pooled)
                );
            }
            out.push((mode, compare(case, &direct, &pooled)));
        }
        out
    }
}

async fn expect_ok(c: &mut Wire, sql: &str) {
    let msgs = c.simple(sql).await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        panic!("harness SQL {sql:?} failed: {e:?}");
    }
}

/// Timings for hand-written cases: (direct, pooled).
pub fn seeded_timing() -> (Timing, Timing) {
    let t = Timing {
        step: Duration::from_secs(3),
        quiet: Duration::from_millis(40),
        late_notifications: Duration::from_secs(2),
    };
    (
        Timing {
            step: Duration::from_secs(10),
            ..t
        },
        t,
    )
}

/// Timings for generated cases, whose notifications are answered synchronously.
pub fn random_timing() -> (Timing, Timing) {
    let (mut d, mut p) = seeded_timing();
    d.quiet = Duration::from_millis(5);
    p.quiet = Duration::from_millis(5);
    (d, p)
}
