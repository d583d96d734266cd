//! A sharded database's transactions stay on one shard: a `BEGIN` sent alone is answered by
//! pgcorral and waits for the first statement that names a shard (it is then run there first),
//! and each later batch of the transaction is checked against the transaction's shard.

use bytes::BytesMut;
use pg_query::protobuf::TransactionStmtKind;
use pg_query::NodeEnum;
use pgwire::backend::TxStatus;
use pgwire::encode;

use crate::shard::plan::parser_options;

/// A transaction opened by a lone `BEGIN` that no statement has placed on a shard yet.
#[derive(Debug, Clone, Default)]
pub struct Deferred {
    /// The client's BEGIN, run on the shard first.
    pub begin: String,
    /// A statement failed (it named no shard, or several): the rest is refused until the
    /// transaction ends, as PostgreSQL refuses it in a failed transaction.
    pub failed: bool,
    /// `SET SHARD` or `SET SHARDING KEY` inside it: the shard of this transaction only.
    pub shard: Option<usize>,
}

impl Deferred {
    pub fn status(&self) -> TxStatus {
        if self.failed {
            TxStatus::Failed
        } else {
            TxStatus::InTransaction
        }
    }
}

/// Transaction control sent alone in a simple Query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxCommand {
    /// BEGIN or START TRANSACTION (the CommandComplete tag).
    Begin(&'static str),
    Commit,
    Rollback,
}

/// The transaction command `sql` is, when it is exactly one BEGIN, START TRANSACTION, COMMIT,
/// END, ROLLBACK or ABORT (without AND CHAIN); the parser is asked only when the first word
/// is one of those.
pub fn command(sql: &str) -> Option<TxCommand> {
    let first = sql
        .trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ';')
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?;
    let words = ["begin", "start", "commit", "end", "rollback", "abort"];
    if !words.iter().any(|w| first.eq_ignore_ascii_case(w)) {
        return None;
    }
    let parsed = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT).ok()?;
    let [raw] = &parsed.protobuf.stmts[..] else {
        return None;
    };
    let Some(NodeEnum::TransactionStmt(t)) = raw.stmt.as_ref().and_then(|n| n.node.as_ref()) else {
        return None;
    };
    match t.kind() {
        TransactionStmtKind::TransStmtBegin => Some(TxCommand::Begin("BEGIN")),
        TransactionStmtKind::TransStmtStart => Some(TxCommand::Begin("START TRANSACTION")),
        TransactionStmtKind::TransStmtCommit if !t.chain => Some(TxCommand::Commit),
        TransactionStmtKind::TransStmtRollback if !t.chain => Some(TxCommand::Rollback),
        _ => None,
    }
}

/// pgcorral's answer to a transaction command while a transaction is deferred (or to the
/// BEGIN that defers one); `None` when the deferred transaction ends with it.
pub fn answer(cmd: TxCommand, deferred: &mut Option<Box<Deferred>>, sql: &str, out: &mut BytesMut) {
    match (cmd, deferred.as_mut()) {
        (TxCommand::Begin(tag), None) => {
            *deferred = Some(Box::new(Deferred {
                begin: sql.to_string(),
                ..Deferred::default()
            }));
            encode::command_complete(out, tag);
        }
        (TxCommand::Begin(_), Some(d)) if d.failed => aborted(out),
        (TxCommand::Begin(tag), Some(_)) => {
            // PostgreSQL warns and goes on.
            encode::notice_response(
                out,
                "WARNING",
                "25001",
                "there is already a transaction in progress",
            );
            encode::command_complete(out, tag);
        }
        (TxCommand::Commit, Some(d)) if d.failed => {
            *deferred = None;
            encode::command_complete(out, "ROLLBACK");
        }
        (TxCommand::Commit, _) => {
            *deferred = None;
            encode::command_complete(out, "COMMIT");
        }
        (TxCommand::Rollback, _) => {
            *deferred = None;
            encode::command_complete(out, "ROLLBACK");
        }
    }
    let status = deferred.as_ref().map_or(TxStatus::Idle, |d| d.status());
    encode::ready_for_query(out, status);
}

/// PostgreSQL's error for a statement in a failed transaction.
pub fn aborted(out: &mut BytesMut) {
    encode::error_response(
        out,
        "ERROR",
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
    );
}

/// Two-phase commit's statements, by their gid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoPhase {
    /// `PREPARE TRANSACTION 'gid'`: ends the transaction on its shard.
    Prepare(String),
    /// `COMMIT PREPARED 'gid'` or `ROLLBACK PREPARED 'gid'`: must reach that shard.
    Finish(String),
}

/// The two-phase statement `sql` is, when it is one alone (the parser is asked only when its
/// first words are PREPARE TRANSACTION, COMMIT PREPARED or ROLLBACK PREPARED); `escapes`: the
/// client's standard_conforming_strings is off.
pub fn two_phase(sql: &str, escapes: bool) -> Option<TwoPhase> {
    let sql_start = skip_comments(sql);
    if !sql_start.starts_with(['p', 'P', 'c', 'C', 'r', 'R']) {
        return None;
    }
    let mut words = sql_start
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty());
    let (first, second) = (words.next()?, words.next()?);
    let is = |w: &str, want: &str| w.eq_ignore_ascii_case(want);
    if !(is(first, "prepare") && is(second, "transaction")
        || (is(first, "commit") || is(first, "rollback")) && is(second, "prepared"))
    {
        return None;
    }
    let options = parser_options(escapes);
    let parsed = pg_query::parse(sql, options).ok()?;
    let [raw] = &parsed.protobuf.stmts[..] else {
        return None;
    };
    let Some(NodeEnum::TransactionStmt(t)) = raw.stmt.as_ref().and_then(|n| n.node.as_ref()) else {
        return None;
    };
    match t.kind() {
        TransactionStmtKind::TransStmtPrepare => Some(TwoPhase::Prepare(t.gid.clone())),
        TransactionStmtKind::TransStmtCommitPrepared
        | TransactionStmtKind::TransStmtRollbackPrepared => Some(TwoPhase::Finish(t.gid.clone())),
        _ => None,
    }
}

/// `sql` after its leading whitespace and comments.
fn skip_comments(mut sql: &str) -> &str {
    loop {
        sql = sql.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ';');
        if let Some(rest) = sql.strip_prefix("--") {
            sql = rest.find('\n').map_or("", |i| &rest[i..]);
        } else if let Some(rest) = sql.strip_prefix("/*") {
            sql = rest.find("*/").map_or("", |i| &rest[i + 2..]);
        } else {
            return sql;
        }
    }
}

/// Whether `texts` (the client's statements) make, release or roll back to a savepoint, and
/// whether they end the transaction (COMMIT, ROLLBACK, PREPARE TRANSACTION, in any form). Only
/// texts holding one of the words those statements start with are parsed.
pub fn control(texts: &[&str], escapes: bool) -> (bool, bool) {
    let (mut savepoint, mut ends) = (false, false);
    for text in texts {
        let lower = text.to_ascii_lowercase();
        let words = [
            "savepoint",
            "release",
            "rollback",
            "commit",
            "end",
            "abort",
            "prepare",
        ];
        if !words.iter().any(|w| lower.contains(w)) {
            continue;
        }
        let Ok(parsed) = pg_query::parse(text, parser_options(escapes)) else {
            continue;
        };
        for raw in &parsed.protobuf.stmts {
            let Some(NodeEnum::TransactionStmt(t)) =
                raw.stmt.as_ref().and_then(|n| n.node.as_ref())
            else {
                continue;
            };
            match t.kind() {
                TransactionStmtKind::TransStmtSavepoint
                | TransactionStmtKind::TransStmtRelease
                | TransactionStmtKind::TransStmtRollbackTo => savepoint = true,
                TransactionStmtKind::TransStmtCommit
                | TransactionStmtKind::TransStmtRollback
                | TransactionStmtKind::TransStmtPrepare => ends = true,
                _ => {}
            }
        }
    }
    (savepoint, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_phase_statements() {
        let prepare = |g: &str| Some(TwoPhase::Prepare(g.into()));
        let finish = |g: &str| Some(TwoPhase::Finish(g.into()));
        assert_eq!(two_phase("PREPARE TRANSACTION 'g1'", false), prepare("g1"));
        assert_eq!(
            two_phase("prepare  transaction 'it''s';", false),
            prepare("it's")
        );
        assert_eq!(two_phase("/* c */ COMMIT PREPARED 'g'", false), finish("g"));
        assert_eq!(two_phase("-- c\nrollback prepared 'g'", false), finish("g"));
        assert_eq!(two_phase(r"COMMIT PREPARED 'a\'b'", true), finish("a'b"));
        assert_eq!(two_phase(r"COMMIT PREPARED E'a\\b'", false), finish(r"a\b"));
        for not in [
            "COMMIT",
            "PREPARE q AS SELECT 1",
            "COMMIT PREPARED 'a'; SELECT 1",
            "SELECT 'COMMIT PREPARED'",
            "ROLLBACK",
        ] {
            assert_eq!(two_phase(not, false), None, "{not}");
        }
    }

    #[test]
    fn transaction_commands() {
        assert_eq!(command("BEGIN"), Some(TxCommand::Begin("BEGIN")));
        assert_eq!(
            command("begin isolation level serializable;"),
            Some(TxCommand::Begin("BEGIN"))
        );
        assert_eq!(
            command("START TRANSACTION READ ONLY"),
            Some(TxCommand::Begin("START TRANSACTION"))
        );
        assert_eq!(command("commit"), Some(TxCommand::Commit));
        assert_eq!(command("END"), Some(TxCommand::Commit));
        assert_eq!(command("ABORT"), Some(TxCommand::Rollback));
        assert_eq!(command("ROLLBACK"), Some(TxCommand::Rollback));
        for not in [
            "BEGIN; SELECT 1",
            "COMMIT AND CHAIN",
            "ROLLBACK TO SAVEPOINT a",
            "SELECT 1",
            "begin_work()",
            "PREPARE TRANSACTION 'x'",
        ] {
            assert_eq!(command(not), None, "{not}");
        }
    }
}
