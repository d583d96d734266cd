//! Normalises backend messages to readable text, blanking only the documented differences, and
//! compares two transcripts message by message.
//!
//! The documented differences (also in docs/testing.md, "Differential tests"):
//! * BackendKeyData (backend pid and cancel key) is not compared;
//! * the ParameterStatus messages of the login are compared as a set (their order is free);
//! * the sender pid of NotificationResponse is blanked, and values of result columns named
//!   `pg_backend_pid` or starting with `pid` are shown as `<pid>`;
//! * NotificationResponses are compared per client as a list of their own, not by their position
//!   among the other messages (PostgreSQL itself sends them whenever the listener is idle);
//! * the source location of errors and notices (fields F, L, R: PostgreSQL's C file, line and
//!   routine) is not compared;
//! * object OIDs of the objects the script created (16384 and above) in RowDescription,
//!   ParameterDescription and message texts are shown as `<oid>`: each run creates them anew.

use super::run::{End, Transcript};
use super::script::Case;
use crate::support::wire::Msg;

/// First user-assigned OID (PostgreSQL's FirstNormalObjectId).
const FIRST_NORMAL_OID: u32 = 16384;

/// One message as text, with the documented differences blanked. `pid_cols` holds the
/// positions of pid columns of the last RowDescription (updated here).
pub fn render(m: &Msg, pid_cols: &mut Vec<usize>) -> String {
    let b = &m.body;
    match m.tag {
        b'C' => format!("CommandComplete {:?}", m.text()),
        b'Z' => format!("ReadyForQuery {}", String::from_utf8_lossy(b)),
        b'1' => "ParseComplete".into(),
        b'2' => "BindComplete".into(),
        b'3' => "CloseComplete".into(),
        b'n' => "NoData".into(),
        b's' => "PortalSuspended".into(),
        b'I' => "EmptyQueryResponse".into(),
        b'c' => "CopyDone".into(),
        b'd' => format!("CopyData {:?}", String::from_utf8_lossy(b)),
        b'S' => {
            let (k, v) = m.parameter();
            format!("ParameterStatus {k}={v}")
        }
        b'A' if b.len() >= 4 => {
            let mut parts = b[4..].split(|&x| x == 0);
            let chan = String::from_utf8_lossy(parts.next().unwrap_or_default());
            let payload = String::from_utf8_lossy(parts.next().unwrap_or_default());
            format!("Notification {chan} {payload:?}")
        }
        b'E' | b'N' => render_fields(m),
        b'T' => {
            let cols = row_description(b).unwrap_or_default();
            pid_cols.clear();
            for (i, c) in cols.iter().enumerate() {
                if c.starts_with("pg_backend_pid:") || c.starts_with("pid") {
                    pid_cols.push(i);
                }
            }
            format!("RowDescription [{}]", cols.join(", "))
        }
        b't' => {
            let types: Vec<String> = b
                .get(2..)
                .unwrap_or_default()
                .chunks(4)
                .map(|c| oid(u32::from_be_bytes(c.try_into().unwrap_or([0; 4]))))
                .collect();
            format!("ParameterDescription [{}]", types.join(", "))
        }
        b'D' => {
            let vals: Vec<String> = m
                .row()
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    _ if pid_cols.contains(&i) => "<pid>".into(),
                    Some(s) => format!("{s:?}"),
                    None => "NULL".into(),
                })
                .collect();
            format!("DataRow [{}]", vals.join(", "))
        }
        t => format!("{}({:?})", t as char, String::from_utf8_lossy(b)),
    }
}

fn oid(o: u32) -> String {
    if o >= FIRST_NORMAL_OID {
        "<oid>".into()
    } else {
        o.to_string()
    }
}

/// Columns as `name:type/attnum@table typmod fmt` (table shown as `t` or `-`).
fn row_description(b: &[u8]) -> Option<Vec<String>> {
    let n = i16::from_be_bytes(b.get(..2)?.try_into().ok()?) as usize;
    let mut pos = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let end = pos + b.get(pos..)?.iter().position(|&x| x == 0)?;
        let name = String::from_utf8_lossy(&b[pos..end]);
        let f = b.get(end + 1..end + 19)?;
        let u32_at = |i: usize| u32::from_be_bytes(f[i..i + 4].try_into().unwrap());
        let table = if u32_at(0) == 0 { "-" } else { "t" };
        let attnum = i16::from_be_bytes([f[4], f[5]]);
        let typmod = i32::from_be_bytes(f[12..16].try_into().unwrap());
        let fmt = i16::from_be_bytes([f[16], f[17]]);
        out.push(format!(
            "{name}:{}/{attnum}@{table} {typmod} {fmt}",
            oid(u32_at(6))
        ));
        pos = end + 19;
    }
    Some(out)
}

/// ErrorResponse/NoticeResponse fields but F, L and R, OIDs of created objects blanked.
fn render_fields(m: &Msg) -> String {
    let kind = if m.tag == b'E' { "Error" } else { "Notice" };
    let mut out = String::from(kind);
    for f in m.body.split(|&x| x == 0) {
        let Some((&code, val)) = f.split_first() else {
            continue;
        };
        if matches!(code, b'F' | b'L' | b'R') {
            continue;
        }
        let val = String::from_utf8_lossy(val);
        let val = if matches!(code, b'M' | b'D' | b'H' | b'W') {
            blank_oids(&val)
        } else {
            val.into_owned()
        };
        out.push_str(&format!(" {}={val:?}", code as char));
    }
    out
}

/// Numbers of five or more digits from 16384 on become `<oid>`.
fn blank_oids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match digits.parse::<u64>() {
            Ok(n) if digits.len() >= 5 && n >= FIRST_NORMAL_OID as u64 => out.push_str("<oid>"),
            _ => out.push_str(digits),
        }
        digits.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
        } else {
            flush(&mut digits, &mut out);
            out.push(ch);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// A difference between the direct and the pooled run.
#[derive(Debug)]
pub struct Difference {
    pub client: usize,
    /// The step (None: login or notifications).
    pub step: Option<usize>,
    pub what: String,
    pub direct: Vec<String>,
    pub pooled: Vec<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(s) => writeln!(f, "  client {}, step {s}: {}", self.client, self.what)?,
            None => writeln!(f, "  client {}: {}", self.client, self.what)?,
        }
        let n = self.direct.len().max(self.pooled.len());
        let first = (0..n)
            .find(|&i| self.direct.get(i) != self.pooled.get(i))
            .unwrap_or(0);
        for i in 0..n {
            let (d, p) = (self.direct.get(i), self.pooled.get(i));
            let mark = if i == first { ">>" } else { "  " };
            if d == p {
                writeln!(f, "    {mark} {i:>2}   {}", d.map_or("", |s| s.as_str()))?;
            } else {
                writeln!(
                    f,
                    "    {mark} {i:>2} direct: {}",
                    d.map_or("(none)", |s| s.as_str())
                )?;
                writeln!(
                    f,
                    "    {mark} {i:>2} pooled: {}",
                    p.map_or("(none)", |s| s.as_str())
                )?;
            }
        }
        Ok(())
    }
}

fn end_text(e: &End) -> Option<String> {
    match e {
        End::Done => None,
        End::Timeout => Some("<no message within the step timeout>".into()),
        End::Closed => Some("<connection closed>".into()),
    }
}

/// Compares the runs; the differences in script order (empty: the same).
pub fn compare(case: &Case, direct: &Transcript, pooled: &Transcript) -> Vec<Difference> {
    let mut out = Vec::new();
    for c in 0..case.clients {
        if direct.login[c] != pooled.login[c] {
            let show = |s: &std::collections::BTreeSet<(String, String)>,
                        o: &std::collections::BTreeSet<(String, String)>| {
                s.difference(o)
                    .map(|(k, v)| format!("ParameterStatus {k}={v}"))
                    .collect()
            };
            out.push(Difference {
                client: c,
                step: None,
                what: "login ParameterStatus set (only the differing ones)".into(),
                direct: show(&direct.login[c], &pooled.login[c]),
                pooled: show(&pooled.login[c], &direct.login[c]),
            });
        }
    }
    let mut pid_cols = (
        vec![Vec::new(); case.clients],
        vec![Vec::new(); case.clients],
    );
    for (i, step) in case.steps.iter().enumerate() {
        let c = step.client;
        let texts = |a: &Option<super::run::StepAnswer>, cols: &mut Vec<usize>| -> Vec<String> {
            match a {
                None => vec!["<not run: the client's connection failed earlier>".into()],
                Some(a) => a
                    .msgs
                    .iter()
                    .map(|m| render(m, cols))
                    .chain(end_text(&a.end))
                    .collect(),
            }
        };
        let d = texts(&direct.steps[i], &mut pid_cols.0[c]);
        let p = texts(&pooled.steps[i], &mut pid_cols.1[c]);
        if d != p {
            out.push(Difference {
                client: c,
                step: Some(i),
                what: step.label.clone(),
                direct: d,
                pooled: p,
            });
        }
    }
    for c in 0..case.clients {
        let d: Vec<String> = direct.notifications[c]
            .iter()
            .map(|m| render(m, &mut Vec::new()))
            .collect();
        let p: Vec<String> = pooled.notifications[c]
            .iter()
            .map(|m| render(m, &mut Vec::new()))
            .collect();
        if d != p {
            out.push(Difference {
                client: c,
                step: None,
                what: "notifications (and any message after the last step)".into(),
                direct: d,
                pooled: p,
            });
        }
    }
    out
}

/// A transcript as text, step by step (for `DIFF_SHOW`).
pub fn dump(case: &Case, t: &Transcript) -> String {
    let mut out = String::new();
    let mut cols = vec![Vec::new(); case.clients];
    for (i, (step, a)) in case.steps.iter().zip(&t.steps).enumerate() {
        out.push_str(&format!("  {i:>3} c{}: {}\n", step.client, step.label));
        if let Some(a) = a {
            for m in &a.msgs {
                out.push_str(&format!("        {}\n", render(m, &mut cols[step.client])));
            }
            if let Some(e) = end_text(&a.end) {
                out.push_str(&format!("        {e}\n"));
            }
        }
    }
    for (c, n) in t.notifications.iter().enumerate() {
        for m in n {
            out.push_str(&format!("  c{c} later: {}\n", render(m, &mut Vec::new())));
        }
    }
    out
}
