//! The log to syslog(3) (`syslog = true`, PgBouncer's `syslog`, `syslog_ident`,
//! `syslog_facility`): one message per line, at the priority of its level.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

use crate::config::syslog_facility;

/// An open connection to syslog; the process has one.
pub struct Syslog {
    /// openlog(3) keeps the pointer: the ident lives as long as the process logs.
    _ident: CString,
}

impl Syslog {
    /// openlog(3) with `ident` (the process id added to each message) and `facility`.
    pub fn open(ident: &str, facility: &str) -> Result<Syslog, String> {
        let ident = CString::new(ident).map_err(|_| "syslog_ident has a NUL byte".to_string())?;
        let Some(facility) = syslog_facility(facility) else {
            return Err(format!("unknown syslog_facility {facility:?}"));
        };
        // SAFETY: `ident` is a valid C string kept alive in the returned value, which the
        // caller keeps for the rest of the process (the subscriber is global).
        unsafe { libc::openlog(ident.as_ptr(), libc::LOG_PID, facility) };
        Ok(Syslog { _ident: ident })
    }
}

/// One line on its way to syslog, sent when the formatter is done with it.
pub struct Line {
    priority: libc::c_int,
    buf: Vec<u8>,
}

impl io::Write for Line {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        while self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        if self.buf.is_empty() {
            return;
        }
        // The line's text is escaped already (no control characters); a NUL cannot occur.
        self.buf.retain(|&b| b != 0);
        let Ok(text) = CString::new(std::mem::take(&mut self.buf)) else {
            return;
        };
        // SAFETY: both pointers are valid C strings; "%s" makes the text data, not a format.
        unsafe { libc::syslog(self.priority, c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// syslog's priority for a level, as PgBouncer maps them.
fn priority(level: &Level) -> libc::c_int {
    match *level {
        Level::ERROR => libc::LOG_ERR,
        Level::WARN => libc::LOG_WARNING,
        Level::INFO => libc::LOG_INFO,
        Level::DEBUG | Level::TRACE => libc::LOG_DEBUG,
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            priority: libc::LOG_INFO,
            buf: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line {
        Line {
            priority: priority(meta.level()),
            buf: Vec::new(),
        }
    }
}
