//! An UPDATE that assigns a sharding key, inside pgcorral's transaction on every shard: run
//! where its rows are (returning each changed row whole), and each row whose key now names
//! another shard deleted where it was and inserted there, so that the commit moves it.

use bytes::BytesMut;
use pgwire::{backend, encode};

use super::fanout::{counted, error, note_ready, read_server, send, whole};
use super::gather::describe::first_fields;
use crate::error::{Error, Kind, Result};
use crate::pool::Checkout;
use crate::session::{self, exec};
use crate::shard::key::Value;
use crate::shard::{scatter, Sharding, Table};

/// Bytes of changed rows pgcorral holds at most while it moves them.
const MAX_BYTES: usize = 64 << 20;

/// One changed row: where its version is, and its columns as text.
struct Changed {
    ctid: String,
    values: Vec<Option<String>>,
}

/// An UPDATE of table `table`'s key about to run on servers `from` (indexes of the servers,
/// which are shards `0..n` in order): the table's columns, as `RETURNING ctid, *` returns
/// them, and where its key columns are among them.
pub struct Moving {
    table: usize,
    columns: Vec<String>,
    keys: Vec<usize>,
}

impl Moving {
    /// Reads the table's columns on the first of `from`. `Ok(Err(e))`: the client's error (the
    /// caller rolls back).
    pub async fn start(
        servers: &mut [&mut Checkout],
        from: &[usize],
        sharding: &Sharding,
        table: usize,
    ) -> Result<std::result::Result<Moving, BytesMut>> {
        let t = &sharding.tables[table];
        let Some(&first) = from.first() else {
            return Ok(Err(error("0A000", "an UPDATE on no shard")));
        };
        let columns = match columns(servers[first], t).await {
            Ok(c) => c,
            Err(e) if e.kind() == Kind::ServerError => return Ok(Err(raw(&e))),
            Err(e) => return Err(e),
        };
        let keys: Option<Vec<usize>> = t
            .columns
            .iter()
            .map(|k| columns.iter().position(|c| c == k))
            .collect();
        let Some(keys) = keys else {
            return Ok(Err(error(
                "0A000",
                "the sharded table's key columns are not all among its columns",
            )));
        };
        Ok(Ok(Moving {
            table,
            columns,
            keys,
        }))
    }

    /// The table's columns (what `RETURNING *` gives).
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// Reads the rows the UPDATE (sent to `from`, its answers read up to its rows) changed,
    /// then moves those whose key now names another shard. `Ok(Ok((n, rows)))`: rows updated,
    /// and the client's `RETURNING` answer (its RowDescription and rows; empty without one);
    /// `Ok(Err(e))`: the client's error (the caller rolls back).
    pub async fn finish(
        &self,
        servers: &mut [&mut Checkout],
        from: &[usize],
        sharding: &Sharding,
    ) -> Result<std::result::Result<(u64, BytesMut), BytesMut>> {
        let t = &sharding.tables[self.table];
        let (columns, keys) = (&self.columns, &self.keys);
        let mut total = 0u64;
        let mut held = 0usize;
        let mut failed = None;
        let mut moving: Vec<(usize, usize, Changed)> = Vec::new();
        let mut returned = Returned::default();
        for &s in from {
            let server = &mut servers[s];
            loop {
                let (tag, body) = read_server(server).await?;
                match tag {
                    backend::DATA_ROW if failed.is_none() => {
                        held += body.len();
                        if held > MAX_BYTES {
                            failed = Some(error(
                                "54000",
                                "the UPDATE changes more rows than pgcorral holds while it moves rows between shards (64 MiB)",
                            ));
                            continue;
                        }
                        let Some((row, theirs)) = changed(&body, columns.len()) else {
                            failed = Some(error(
                                "22021",
                                "a row to move between shards has a value pgcorral cannot read back (not UTF-8)",
                            ));
                            continue;
                        };
                        returned.row(theirs);
                        match shard_of(sharding, t, keys, &row) {
                            Ok(to) if to != s => moving.push((s, to, row)),
                            Ok(_) => {}
                            Err(msg) => failed = Some(error("22P02", &msg)),
                        }
                    }
                    backend::COMMAND_COMPLETE => {
                        total += counted(&body).map_or(0, |(_, n)| n);
                    }
                    backend::ERROR_RESPONSE => {
                        failed.get_or_insert_with(|| whole(tag, &body));
                    }
                    backend::READY_FOR_QUERY => {
                        note_ready(server, &body);
                        break;
                    }
                    backend::ROW_DESCRIPTION => {
                        returned.describe(&whole(tag, &body), columns.len())
                    }
                    _ => {}
                }
            }
        }
        if let Some(e) = failed {
            return Ok(Err(e));
        }
        let name = qualified(t);
        // Each source shard's moved rows deleted, each destination's inserted.
        for &s in from {
            let ctids: Vec<&str> = moving
                .iter()
                .filter(|m| m.0 == s)
                .map(|m| m.2.ctid.as_str())
                .collect();
            if ctids.is_empty() {
                continue;
            }
            let mut sql = format!("DELETE FROM ONLY {name} WHERE ctid = ANY (ARRAY[");
            for (i, c) in ctids.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                session::literal(&mut sql, c);
            }
            sql.push_str("]::pg_catalog.tid[])");
            if let Err(e) = run(servers[s], &sql).await? {
                return Ok(Err(e));
            }
        }
        for (to, server) in servers.iter_mut().enumerate() {
            let rows: Vec<&Changed> = moving.iter().filter(|m| m.1 == to).map(|m| &m.2).collect();
            if rows.is_empty() {
                continue;
            }
            let mut sql = format!("INSERT INTO {name} (");
            for (i, c) in columns.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                session::ident(&mut sql, c);
            }
            sql.push_str(") OVERRIDING SYSTEM VALUE VALUES ");
            for (i, row) in rows.iter().enumerate() {
                sql.push_str(if i > 0 { ", (" } else { "(" });
                for (j, v) in row.values.iter().enumerate() {
                    if j > 0 {
                        sql.push_str(", ");
                    }
                    match v {
                        Some(v) => session::literal(&mut sql, v),
                        None => sql.push_str("NULL"),
                    }
                }
                sql.push(')');
            }
            if let Err(e) = run(server, &sql).await? {
                return Ok(Err(e));
            }
        }
        Ok(Ok((total, returned.out)))
    }
}

/// Runs UPDATE `sql` (a simple Query's) of sharded table `table` on servers `from` (indexes of
/// `servers`, which are shards `0..n` in order) and moves the rows whose key now names another
/// shard, as [`Moving::finish`].
pub async fn update(
    servers: &mut [&mut Checkout],
    from: &[usize],
    sql: &str,
    sharding: &Sharding,
    table: usize,
) -> Result<std::result::Result<(u64, BytesMut), BytesMut>> {
    let rewritten = match scatter::moving(sql) {
        Ok(r) => r,
        Err(msg) => return Ok(Err(error("0A000", &msg))),
    };
    if from.is_empty() {
        return Ok(Ok((0, BytesMut::new())));
    }
    let moving = match Moving::start(servers, from, sharding, table).await? {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    let mut query = BytesMut::new();
    pgwire::encode::query(&mut query, &rewritten);
    for &s in from {
        send(servers[s], &query).await?;
    }
    moving.finish(servers, from, sharding).await
}

/// The table's columns, in order (what `RETURNING *` returns), as the server's search path
/// finds the table.
async fn columns(server: &mut Checkout, t: &Table) -> Result<Vec<String>> {
    let mut name = String::new();
    session::literal(&mut name, &qualified(t));
    let sql = format!(
        "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {name}::pg_catalog.regclass \
         AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    );
    let rows = exec::query_in_transaction(server, &sql).await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect())
}

/// `schema.name` or `name`, quoted.
fn qualified(t: &Table) -> String {
    let mut name = String::new();
    if let Some(s) = &t.schema {
        session::ident(&mut name, s);
        name.push('.');
    }
    session::ident(&mut name, &t.name);
    name
}

/// The client's `RETURNING` answer as the shards give it: the first RowDescription cut to the
/// client's columns, then every changed row's values of them (in the format they came in).
#[derive(Default)]
struct Returned {
    /// The client's columns (before the ctid and the table's), once described.
    visible: Option<usize>,
    out: BytesMut,
}

impl Returned {
    /// A shard's RowDescription of `RETURNING <client's>, ctid, *` (`n` columns in the table).
    fn describe(&mut self, message: &[u8], n: usize) {
        if self.visible.is_some() {
            return;
        }
        let fields = message
            .get(5..7)
            .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
        let visible = usize::from(fields).saturating_sub(n + 1);
        self.visible = Some(visible);
        if visible > 0 {
            if let Some(d) = first_fields(message, visible) {
                self.out.extend_from_slice(&d);
            }
        }
    }

    /// One changed row's client columns: their count and values as a DataRow's body has them.
    fn row(&mut self, (count, values): (usize, &[u8])) {
        if count > 0 {
            encode::message(&mut self.out, backend::DATA_ROW, |b| {
                b.extend_from_slice(&u16::try_from(count).unwrap_or(0).to_be_bytes());
                b.extend_from_slice(values);
            });
        }
    }
}

/// A DataRow of `RETURNING <client's>, ctid, *` (`n` columns after the ctid), and the client's
/// columns before them (their count and bytes); `None` when a value of the table's is not
/// UTF-8 or the row is malformed.
fn changed(body: &[u8], n: usize) -> Option<(Changed, (usize, &[u8]))> {
    let count = u16::from_be_bytes(body.get(..2)?.try_into().ok()?) as usize;
    let theirs = count.checked_sub(n + 1)?;
    let mut pos = 2;
    for _ in 0..theirs {
        let len = i32::from_be_bytes(body.get(pos..pos + 4)?.try_into().ok()?);
        pos += 4 + usize::try_from(len).unwrap_or(0);
    }
    let client = (theirs, body.get(2..pos)?);
    let mut values = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        let len = i32::from_be_bytes(body.get(pos..pos + 4)?.try_into().ok()?);
        pos += 4;
        if len < 0 {
            values.push(None);
            continue;
        }
        let v = body.get(pos..pos + len as usize)?;
        pos += len as usize;
        values.push(Some(std::str::from_utf8(v).ok()?.to_string()));
    }
    let ctid = values.remove(0)?;
    Some((Changed { ctid, values }, client))
}

/// The shard a changed row's key now names.
fn shard_of(
    sharding: &Sharding,
    t: &Table,
    keys: &[usize],
    row: &Changed,
) -> std::result::Result<usize, String> {
    let mut values = Vec::with_capacity(keys.len());
    for (&k, &ty) in keys.iter().zip(&t.types) {
        let v = match &row.values[k] {
            Some(text) => Value::from_text(ty, text.as_bytes())
                .map_err(|e| format!("a moved row's key cannot be read: {}", e.why))?,
            None => Value::Null,
        };
        values.push(v);
    }
    Ok(sharding.shard_of(&t.types, &values))
}

/// Runs pgcorral's `sql` inside the server's transaction: `Ok(Err(e))` is the server's error.
async fn run(server: &mut Checkout, sql: &str) -> Result<std::result::Result<(), BytesMut>> {
    match exec::in_transaction(server, sql).await {
        Ok(()) => Ok(Ok(())),
        Err(e) if e.kind() == Kind::ServerError => Ok(Err(raw(&e))),
        Err(e) => Err(e),
    }
}

fn raw(e: &Error) -> BytesMut {
    let mut out = BytesMut::new();
    e.write_response(&mut out, "ERROR");
    out
}
