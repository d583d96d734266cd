//! An `INSERT ... VALUES` whose rows are on several shards (a simple Query alone, outside a
//! transaction): one INSERT per shard with that shard's rows (PostgreSQL's parser writes each
//! back as SQL), every shard in a transaction, committed everywhere or rolled back everywhere,
//! answered as one INSERT of all the rows (its RETURNING rows too).

use bytes::BytesMut;
use pg_query::protobuf::ParseResult;
use pg_query::NodeEnum;
use pgwire::backend::{self, TxStatus};
use pgwire::header::HEADER_LEN;
use pgwire::{encode, frontend, Header};

use super::shard_tx::{
    abort, answer_error, answer_raw, commit, note_ready, open, read_server, reply, send,
};
use super::LoggedIn;
use crate::client_conn::ClientConn;
use crate::error::Result;

/// Runs the client's INSERT (a Query at the front of its buffer) whose rows go to `rows`'
/// shards, in order.
pub(super) async fn insert(
    client: &mut ClientConn,
    session: &mut LoggedIn,
    rows: Vec<usize>,
) -> Result<()> {
    let len = Header::parse(&client.buf, client.max_len)
        .ok()
        .flatten()
        .map_or(0, |h| h.total_len());
    let query = client.buf.split_to(len.min(client.buf.len()));
    let text = query
        .get(HEADER_LEN..)
        .and_then(frontend::query_text)
        .unwrap_or_default()
        .to_string();
    let per_shard = match split(&text, &rows) {
        Ok(p) => p,
        Err(msg) => return answer_error(client, "0A000", &msg).await,
    };
    let shards: Vec<usize> = per_shard.iter().map(|(s, _)| *s).collect();
    let mut servers = open(client, session, shards).await?;
    // Each shard's answers are kept until every shard has answered: a failure on one leaves
    // nothing of the others behind, and the client sees none of it.
    let mut described: Option<BytesMut> = None;
    let mut data = BytesMut::new();
    let mut total = 0u64;
    let mut tag_prefix = String::from("INSERT 0");
    for (s, (_, sql)) in servers.iter_mut().zip(&per_shard) {
        let mut q = BytesMut::new();
        encode::query(&mut q, sql);
        send(s, &q).await?;
        let mut error: Option<BytesMut> = None;
        loop {
            let (tag, body) = read_server(s).await?;
            let whole = || {
                let mut m = BytesMut::new();
                encode::message(&mut m, tag, |b| b.extend_from_slice(&body));
                m
            };
            match tag {
                backend::ROW_DESCRIPTION if described.is_none() => described = Some(whole()),
                backend::DATA_ROW => data.extend_from_slice(&whole()),
                backend::COMMAND_COMPLETE => {
                    let t = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body))
                        .into_owned();
                    if let Some((prefix, n)) = t.rsplit_once(' ') {
                        total += n.parse::<u64>().unwrap_or(0);
                        tag_prefix = prefix.to_string();
                    }
                }
                backend::ERROR_RESPONSE => error = error.or_else(|| Some(whole())),
                backend::READY_FOR_QUERY => {
                    note_ready(s, &body);
                    break;
                }
                _ => {}
            }
        }
        if let Some(error) = error {
            abort(&mut servers).await;
            return answer_raw(client, &error, true).await;
        }
    }
    commit(&mut servers).await?;
    let mut out = described.unwrap_or_default();
    out.extend_from_slice(&data);
    encode::command_complete(&mut out, &format!("{tag_prefix} {total}"));
    encode::ready_for_query(&mut out, TxStatus::Idle);
    reply(client, &out).await
}

/// The INSERT of `text` as one INSERT per shard: (shard, SQL with that shard's rows), in the
/// order shards first appear.
fn split(text: &str, rows: &[usize]) -> std::result::Result<Vec<(usize, String)>, String> {
    let parsed = pg_query::parse(text, pg_query::ParserOptions::DEFAULT)
        .map_err(|e| e.to_string())?
        .protobuf;
    let values = |p: &ParseResult| -> Option<Vec<pg_query::Node>> {
        let NodeEnum::InsertStmt(i) = p.stmts.first()?.stmt.as_ref()?.node.as_ref()? else {
            return None;
        };
        let NodeEnum::SelectStmt(s) = i.select_stmt.as_ref()?.node.as_ref()? else {
            return None;
        };
        Some(s.values_lists.clone())
    };
    let all = values(&parsed).ok_or("not an INSERT ... VALUES")?;
    if all.len() != rows.len() {
        return Err("the INSERT's rows could not be matched to their shards".into());
    }
    let mut shards: Vec<usize> = Vec::new();
    for &s in rows {
        if !shards.contains(&s) {
            shards.push(s);
        }
    }
    shards
        .into_iter()
        .map(|shard| {
            let mut p = parsed.clone();
            let kept: Vec<pg_query::Node> = all
                .iter()
                .zip(rows)
                .filter(|(_, &s)| s == shard)
                .map(|(row, _)| row.clone())
                .collect();
            set_values(&mut p, kept);
            pg_query::deparse(&p, Default::default())
                .map(|sql| (shard, sql))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn set_values(p: &mut ParseResult, rows: Vec<pg_query::Node>) {
    let Some(NodeEnum::InsertStmt(i)) = p
        .stmts
        .first_mut()
        .and_then(|r| r.stmt.as_mut())
        .and_then(|n| n.node.as_mut())
    else {
        return;
    };
    if let Some(NodeEnum::SelectStmt(s)) = i.select_stmt.as_mut().and_then(|n| n.node.as_mut()) {
        s.values_lists = rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_insert_per_shard_with_its_rows() {
        let sql = "INSERT INTO t (k, v) VALUES (1, 'a'), (2, 'b'), (3, 'c') RETURNING k";
        let got = split(sql, &[1, 0, 1]).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 1);
        assert!(got[0].1.contains("(1, 'a'), (3, 'c')"), "{}", got[0].1);
        assert!(got[0].1.contains("RETURNING k"), "{}", got[0].1);
        assert_eq!(got[1].0, 0);
        assert!(
            got[1].1.contains("(2, 'b')") && !got[1].1.contains("'a'"),
            "{}",
            got[1].1
        );
        assert!(split(sql, &[0, 1]).is_err());
    }
}
