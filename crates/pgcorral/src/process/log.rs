//! Where the log goes: stderr (unless `-q` or `-d`) and `logfile` (appended), at the level
//! `log_level` names, or debug with `-v` and trace with `-vv`; RUST_LOG wins over both; in
//! pgcorral's format or PgBouncer's (`log_format`).

use std::sync::Arc;

use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{fmt, EnvFilter};

use super::log_line::PgbouncerLine;
use super::syslog::Syslog;
use crate::config::{General, LogFormat};

/// The log's destinations, opened before the process detaches or changes user.
pub struct Output {
    /// Also to stderr.
    pub stderr: bool,
    /// The open logfile, when one is configured.
    pub file: Option<std::fs::File>,
    /// syslog, when `syslog` is on.
    pub syslog: Option<Syslog>,
}

impl Output {
    /// Opens `logfile` (when not empty) for appending, and syslog when `syslog` is on;
    /// `stderr`: also log there.
    pub fn open(g: &General, stderr: bool) -> Result<Output, String> {
        let file = match g.logfile.as_str() {
            "" => None,
            path => Some(
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .map_err(|e| format!("cannot open logfile '{path}': {e}"))?,
            ),
        };
        let syslog = match g.syslog {
            true => Some(Syslog::open(&g.syslog_ident, &g.syslog_facility)?),
            false => None,
        };
        Ok(Output {
            stderr,
            file,
            syslog,
        })
    }

    /// Installs the global subscriber; `filter` is a tracing filter ("info", "pgcorral=debug").
    pub fn init(self, filter: &str, format: LogFormat) {
        let to_file = self.file.is_some();
        let writer = match (self.stderr, self.file) {
            (true, Some(f)) => BoxMakeWriter::new(std::io::stderr.and(Arc::new(f))),
            (true, None) => BoxMakeWriter::new(std::io::stderr),
            (false, Some(f)) => BoxMakeWriter::new(Arc::new(f)),
            (false, None) => BoxMakeWriter::new(std::io::sink),
        };
        // Colours only for a terminal that is the log's only reader.
        let ansi = self.stderr && !to_file && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let lines = fmt::layer().with_writer(writer);
        let lines = match format {
            LogFormat::Pgcorral => lines.with_ansi(ansi).boxed(),
            LogFormat::Pgbouncer => lines
                .with_ansi(false)
                .event_format(PgbouncerLine::new())
                .boxed(),
        };
        // syslog stamps its own time and process id.
        let syslog = self.syslog.map(|s| {
            let l = fmt::layer().with_writer(s).with_ansi(false);
            match format {
                LogFormat::Pgcorral => l.without_time().boxed(),
                LogFormat::Pgbouncer => l.event_format(PgbouncerLine::bare()).boxed(),
            }
        });
        tracing_subscriber::registry()
            .with(lines)
            .with(syslog)
            .with(EnvFilter::new(filter))
            .init();
    }
}

/// The tracing filter: RUST_LOG when set, else debug for `-v`, trace for `-vv`, else
/// `log_level`.
pub fn filter(rust_log: Option<String>, verbose: u8, log_level: &str) -> String {
    match (rust_log, verbose) {
        (Some(f), _) => f,
        (None, 0) => log_level.to_string(),
        (None, 1) => "debug".to_string(),
        (None, _) => "trace".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rust_log_then_verbose_then_log_level() {
        assert_eq!(super::filter(Some("warn".into()), 2, "info"), "warn");
        assert_eq!(super::filter(None, 0, "info"), "info");
        assert_eq!(super::filter(None, 1, "info"), "debug");
        assert_eq!(super::filter(None, 3, "info"), "trace");
    }
}
