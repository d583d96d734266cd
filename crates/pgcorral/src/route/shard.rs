//! The shard of a sharded database's request: the shard its client named (comment, `SET SHARD`,
//! `SET SHARDING KEY`), else the keys its statements name with their constants and Bind
//! parameters, else the database's default shard.

use bytes::BytesMut;
use smallvec::SmallVec;
use std::sync::Arc;

use pgwire::frontend::{self, query_text, BindBody};
use pgwire::Header;
use pgwire::{backend, encode};

use super::hint::{self, ShardChoice};
use crate::client_conn::ClientConn;
use crate::cluster::{Cluster, Shards, Target, Want};
use crate::error::{Kind, Result};
use crate::logsafe::Esc;
use crate::pool::ClientWait;
use crate::prepared;
use crate::session;
use crate::session::exec;
use crate::shard::key::KeyType;
use crate::shard::number::Typed;
use crate::shard::plan::{NearPlan, Place, Plan, Spans};
use crate::shard::read::Param;
use crate::shard::scatter::{self, Write};
use crate::shard::{Facts, Sharding, Table};

/// The shard of the request at the start of the client's buffer, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shard {
    One(usize),
    /// Any shard answers it alike.
    Any,
    /// It names no shard: the database's default shard takes it, else it is refused (bytes of
    /// the request, up to its Sync or its Query, and the message for the client).
    NoKey(usize, String),
    /// A statement whose keys are on these shards (bytes of the request, the shards, and the
    /// message for the client if it cannot be run on them).
    Several(usize, Vec<usize>, String),
    /// An UPDATE that assigns sharded table `t`'s key, the request's one statement (bytes of the
    /// request, the table, the shards that may hold its rows (empty: every shard), and the
    /// message for the client if its rows cannot be moved).
    MovesKey(usize, usize, Vec<usize>, String),
    /// An extended-protocol request whose bound statements are on several shards (bytes of the
    /// request, each Bind's shards in order: one, or every shard for an UPDATE or DELETE that
    /// names no key): split between them.
    Pipeline(usize, Vec<Vec<usize>>),
    /// A write of omnisharded tables only, the request's one statement (bytes of the request,
    /// and the message for the client if it cannot be run on every shard).
    Omni(usize, String),
    /// Refused (bytes of the request and the message for the client).
    Refused(usize, String),
    /// The request's values are still to come (a Parse whose Bind is not read yet).
    NeedMore,
    /// Sharded table `n`'s columns must be read from a shard's catalog first.
    NeedColumns(usize),
    /// A `COPY ... FROM STDIN` (a simple Query alone) into sharded table `n`.
    CopyIn(usize),
    /// An `INSERT ... VALUES` (its request's one statement) whose rows are on several shards:
    /// each row's shard.
    SplitInsert(Vec<usize>),
}

/// Where the request goes: `chosen` is the client's `SET SHARD` or `SET SHARDING KEY` (already
/// a shard), `writes` whether the request may write. `query`: the request's whole simple Query
/// (length and text) when the caller has read it already. `near`: the client's last plan, and
/// whether its standard_conforming_strings is off.
pub fn shard_of(
    client: &ClientConn,
    query: Option<(usize, &str)>,
    sharding: &Sharding,
    (near, escapes): (&mut Option<NearPlan>, bool),
    chosen: Option<usize>,
    writes: impl FnOnce() -> bool,
) -> Shard {
    let batch = match query.map(Batch::query).or_else(|| Batch::read(client)) {
        Some(b) => b,
        None => return Shard::NeedMore,
    };
    let by_comment = batch.first_text.and_then(hint::comment_shard);
    if let Some(choice) = by_comment {
        return match choose(sharding, &choice) {
            Ok(n) => Shard::One(n),
            Err(msg) => Shard::Refused(batch.len, msg),
        };
    }
    if let Some(n) = chosen {
        return Shard::One(n);
    }
    let mut place = Place::Any;
    let mut spans = Spans::new();
    // Each bound statement's shards, and whether they may be split between shards: an
    // extended-protocol pipeline whose statements each name one shard or none, or are UPDATEs
    // or DELETEs that name no key (every shard).
    let mut per_bind: SmallVec<[On; 4]> = SmallVec::new();
    let (mut split, mut splittable) = (false, !batch.simple);
    let binds = batch.statements.iter().filter(|s| s.2.is_some()).count();
    // The last text judged a keyless UPDATE or DELETE, and the verdict (a driver's batch binds
    // one statement many times).
    let mut judged: Option<(&str, bool)> = None;
    for &(text, types, bind, runs) in &batch.statements {
        let plan = sharding
            .plans
            .near(near, sharding, text, escapes, &mut spans);
        let here = match plan_place(&plan, sharding, text, &spans, types, bind) {
            // Parsed and described, not run: any shard describes it alike (a read or write
            // across shards is placed when it is bound).
            Place::CopyIn(_)
            | Place::SplitInsert(_)
            | Place::Default(_)
            | Place::Several(..)
            | Place::MovesKey(..)
            | Place::Omni(_)
                if !runs =>
            {
                Place::Any
            }
            p => p,
        };
        // A keyless UPDATE or DELETE among several Binds (no default shard): every shard runs
        // it, its row counts summed.
        let mut rows_write = || match judged {
            Some((t, verdict)) if t == text => verdict,
            _ => {
                let verdict = matches!(
                    scatter::plan(sharding, text, escapes),
                    Ok(Some(Write::Rows))
                );
                judged = Some((text, verdict));
                verdict
            }
        };
        let every = matches!(here, Place::Default(_))
            && bind.is_some()
            && binds > 1
            && splittable
            && sharding.default_shard.is_none()
            && rows_write();
        if every {
            split = true;
        }
        let here = if every { Place::Any } else { here };
        if bind.is_some() {
            match &here {
                _ if every => per_bind.push(On::Every),
                Place::Shard(n) => per_bind.push(On::One(*n)),
                Place::Any => per_bind.push(On::Any),
                _ => splittable = false,
            }
        }
        place = match (place, here) {
            (Place::Any, p) | (p, Place::Any) => p,
            (Place::Shard(a), Place::Shard(b)) if a != b && splittable => {
                split = true;
                Place::Shard(a)
            }
            (Place::Shard(a), Place::Shard(b)) if a != b => Place::Refuse(format!(
                "the request's statements are on shards {a} and {b}: a request goes to one shard"
            )),
            (p @ (Place::NeedColumns(_) | Place::CopyIn(_) | Place::SplitInsert(_)), _)
            | (_, p @ (Place::NeedColumns(_) | Place::CopyIn(_) | Place::SplitInsert(_))) => p,
            (p @ Place::Refuse(_), _) | (_, p @ Place::Refuse(_)) => p,
            (Place::Several(_, why), _) | (_, Place::Several(_, why)) => Place::Refuse(why),
            (Place::MovesKey(_, _, why), _) | (_, Place::MovesKey(_, _, why)) => Place::Refuse(why),
            (p @ Place::Shard(_), _) | (_, p @ Place::Shard(_)) => p,
            (p @ Place::Default(_), _) | (_, p @ Place::Default(_)) => p,
            (p @ Place::Omni(_), Place::Omni(_)) => p,
        };
    }
    // Transaction control has no place in a request split between shards (each part runs in
    // a transaction of pgcorral's).
    let controls = |t: &&str| {
        super::tx::command(t).is_some() || super::tx::control(&[*t], escapes) != (false, false)
    };
    if split && batch.statements.iter().map(|s| s.0).any(|t| controls(&t)) {
        return Shard::Refused(
            batch.len,
            "a request whose statements are on several shards cannot hold transaction control (BEGIN, COMMIT, ROLLBACK, savepoints): send it in a request of its own".into(),
        );
    }
    if split && splittable && matches!(place, Place::Shard(_) | Place::Any) {
        let first = per_bind
            .iter()
            .filter_map(|s| match s {
                On::One(n) => Some(*n),
                _ => None,
            })
            .min()
            .unwrap_or(0);
        let on = |s: &On| match s {
            On::One(n) => vec![*n],
            On::Any => vec![first],
            On::Every => (0..sharding.shards).collect(),
        };
        return Shard::Pipeline(batch.len, per_bind.iter().map(on).collect());
    }
    if split {
        return Shard::Refused(
            batch.len,
            "the request's statements are on several shards, and some name no one shard: a request is split between shards only when each of its statements names one shard".into(),
        );
    }
    // Whether it may write matters only for these.
    let writes = matches!(place, Place::Omni(_)) && writes();
    placed(place, (batch.len, batch.statements.len()), writes)
}

/// The request's shard from its statements' `place` (`len` bytes, `statements` of them;
/// `writes`: an omnisharded table's statement may write).
fn placed(place: Place, (len, statements): (usize, usize), writes: bool) -> Shard {
    match place {
        Place::Shard(n) => Shard::One(n),
        Place::Any => Shard::Any,
        Place::Omni(t) if writes && statements == 1 => Shard::Omni(
            len,
            format!("table {t} is omnisharded (the same on every shard): a write of it goes to every shard; name the shard to write one copy"),
        ),
        Place::Omni(t) if writes => Shard::Refused(
            len,
            format!("table {t} is omnisharded (the same on every shard): a write of it goes to every shard only when it is the request's one statement; name the shard to write one copy"),
        ),
        Place::Omni(_) => Shard::Any,
        Place::NeedColumns(t) => Shard::NeedColumns(t),
        Place::CopyIn(t) if statements == 1 => Shard::CopyIn(t),
        Place::SplitInsert(rows) if statements == 1 => Shard::SplitInsert(rows),
        Place::SplitInsert(_) => Shard::Refused(
            len,
            "an INSERT whose rows are on several shards is split only when it is the request's one statement".into(),
        ),
        Place::CopyIn(_) => Shard::Refused(
            len,
            "COPY FROM STDIN into a sharded table is split to the shards only when it is the request's one statement".into(),
        ),
        Place::Default(why) => Shard::NoKey(len, why),
        Place::Refuse(why) => Shard::Refused(len, why),
        Place::Several(_, why) if statements != 1 => Shard::Refused(len, why),
        Place::Several(shards, why) => Shard::Several(len, shards, why),
        Place::MovesKey(t, shards, why) if statements == 1 => {
            Shard::MovesKey(len, t, shards, why)
        }
        Place::MovesKey(_, _, why) => Shard::Refused(len, why),
    }
}

/// Where one bound statement of a request split between shards runs.
#[derive(Clone, Copy)]
enum On {
    One(usize),
    /// Any shard (the first the request names).
    Any,
    /// Every shard: an UPDATE or DELETE that names no key.
    Every,
}

/// The request at the front of the client's buffer that runs a `COPY ... FROM STDIN` (a Query,
/// or Parse, Bind, Describe, Execute up to a Sync): its length, the COPY's text, and the
/// answers due before the COPY starts (ParseComplete, BindComplete, NoData for a Describe), as
/// PostgreSQL gives them.
pub fn copy_request(client: &ClientConn) -> Option<(usize, String, BytesMut)> {
    let batch = Batch::read(client)?;
    let text = batch.statements.first()?.0.to_string();
    let mut early = BytesMut::new();
    let mut pos = 0;
    while pos < batch.len {
        let h = Header::parse(&client.buf[pos..], client.max_len).ok()??;
        match h.tag {
            frontend::PARSE => encode::message(&mut early, backend::PARSE_COMPLETE, |_| {}),
            frontend::BIND => encode::message(&mut early, backend::BIND_COMPLETE, |_| {}),
            frontend::DESCRIBE => {
                if client.buf.get(pos + pgwire::header::HEADER_LEN) == Some(&b'S') {
                    encode::message(&mut early, backend::PARAMETER_DESCRIPTION, |b| {
                        b.extend_from_slice(&0u16.to_be_bytes())
                    });
                }
                encode::message(&mut early, backend::NO_DATA, |_| {});
            }
            _ => {}
        }
        pos += h.total_len();
    }
    Some((batch.len, text, early))
}

/// The request at the front of the client's buffer runs no statement (Parse, Describe,
/// Close, Sync only).
pub fn runs_nothing(client: &ClientConn) -> bool {
    Batch::read(client).is_some_and(|b| b.statements.iter().all(|s| !s.3) && !b.simple)
}

/// Bytes of the whole request at the front of the client's buffer (`None`: not all read).
pub fn request_len(client: &ClientConn) -> Option<usize> {
    Batch::read(client).map(|b| b.len)
}

/// The SQL texts of the request at the front of the client's buffer (its Query, or each
/// statement its Parses and Binds name), once it is whole.
pub fn batch_texts(client: &ClientConn) -> Option<SmallVec<[&str; 2]>> {
    let batch = Batch::read(client)?;
    Some(batch.statements.iter().map(|s| s.0).collect())
}

/// The text of the request's one statement when it is an extended-protocol request that binds
/// it (and holds no other), once it is whole.
pub fn bound_text(client: &ClientConn) -> Option<&str> {
    let batch = Batch::read(client)?;
    match &batch.statements[..] {
        [(text, _, Some(_), true)] if !batch.simple => Some(text),
        _ => None,
    }
}

/// Reads sharded table `table`'s columns from a shard's catalog (for an INSERT without a
/// column list): on a server of shard 0, under the server's own search_path.
pub async fn learn_columns(
    cluster: &Cluster,
    sharding: &Sharding,
    table: usize,
    worker: usize,
) -> Result<()> {
    let sql = format!(
        "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {}::regclass \
         AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        name_literal(&sharding.tables[table])
    );
    let mut server = cluster
        .checkout(
            Target::first_shard(Want::Any, false),
            worker,
            0,
            ClientWait::default(),
        )
        .await?;
    let columns: Vec<String> = match exec::query(&mut server, &sql).await {
        Ok(rows) => rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect(),
        // No such table (yet): asked again next time.
        Err(e) if e.kind() == Kind::ServerError => Vec::new(),
        Err(e) => return Err(e),
    };
    if !columns.is_empty() {
        sharding.plans.learn_columns(table, columns);
    }
    Ok(())
}

/// Asks every shard's primary whether it holds prepared transaction `gid` (one pgcorral does
/// not know: prepared before a restart, or not through pgcorral), and notes the first that
/// does; when none does, shard 0, whose PostgreSQL then gives its own error (42704).
pub async fn find_gid(
    cluster: &Cluster,
    sharding: &Sharding,
    gid: &str,
    worker: usize,
) -> Result<()> {
    let mut sql = String::from("SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE gid = ");
    session::literal(&mut sql, gid);
    let mut holding = Vec::new();
    for shard in 0..sharding.shards {
        let mut target = Target::first_shard(Want::Primary, false);
        target.shards = Shards::One(shard);
        let mut server = cluster
            .checkout(target, worker, 0, ClientWait::default())
            .await?;
        if !exec::query(&mut server, &sql).await?.is_empty() {
            holding.push(shard);
        }
    }
    // Held by several shards: a transaction that spread to them (or the client's own
    // prepares of one gid on each), finished on all of them at once.
    match holding[..] {
        [] => sharding.gids.note(gid, 0),
        [one] => sharding.gids.note(gid, one),
        _ => sharding.gids.note_together(gid, holding),
    }
    Ok(())
}

/// Reads shard 0's catalog once for a sharded database: declared text keys under a
/// non-deterministic collation are refused (PostgreSQL hashes their `strxfrm` form), and with
/// `sharded_tables_from_catalog` its hash-partitioned tables become sharded tables. The
/// completed sharding replaces the cluster's. A catalog that cannot be read is logged and
/// the declared tables are used as they are.
pub async fn read_catalog(
    cluster: &Cluster,
    sharding: &Arc<Sharding>,
    worker: usize,
) -> Result<Arc<Sharding>> {
    let mut server = cluster
        .checkout(
            Target::first_shard(Want::Any, false),
            worker,
            0,
            ClientWait::default(),
        )
        .await?;
    let mut refused = Vec::new();
    for (i, t) in sharding.tables.iter().enumerate() {
        let textual =
            |ty: &KeyType| matches!(ty, KeyType::Text | KeyType::Varchar | KeyType::Bpchar);
        if !t.types.iter().any(textual) {
            continue;
        }
        let sql = format!(
            "SELECT a.attname FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
             WHERE a.attrelid = pg_catalog.to_regclass({}) AND a.attnum > 0 \
             AND NOT a.attisdropped AND NOT c.collisdeterministic",
            name_literal(t)
        );
        match exec::query(&mut server, &sql).await {
            Ok(rows) => {
                let bad: Vec<String> = rows
                    .into_iter()
                    .filter_map(|r| r.into_iter().next().flatten())
                    .filter(|c| t.columns.contains(c))
                    .collect();
                if !bad.is_empty() {
                    refused.push((i, nondeterministic(&t.name, &bad)));
                }
            }
            Err(e) if e.kind() == Kind::ServerError => {
                tracing::warn!(table = %Esc(&t.name), error = %Esc(&e), "could not read a sharded table's key collations");
            }
            Err(e) => return Err(e),
        }
    }
    let mut more = Vec::new();
    if sharding.from_catalog {
        match exec::query(&mut server, HASH_PARTITIONED).await {
            Ok(rows) => more = partitioned_tables(rows),
            Err(e) if e.kind() == Kind::ServerError => {
                tracing::warn!(error = %Esc(&e), "could not read the shards' hash-partitioned tables");
            }
            Err(e) => return Err(e),
        }
    }
    let facts = match exec::query(&mut server, FACTS).await {
        Ok(rows) => facts(rows),
        Err(e) if e.kind() == Kind::ServerError => {
            tracing::warn!(error = %Esc(&e), "could not read what reads across shards need from the catalog");
            Facts::default()
        }
        Err(e) => return Err(e),
    };
    drop(server);
    // Another client's read may have finished first: its sharding (and what its clients have
    // learned into it since, such as a table's columns) stays.
    if let Some(now) = cluster.sharding().filter(|s| s.checked) {
        return Ok(now);
    }
    let done = Arc::new(sharding.completed(more, refused, facts));
    cluster.set_sharding(done.clone());
    Ok(done)
}

/// Each hash-partitioned table's key columns: schema, table, column, its type, whether its
/// partition collation is deterministic; in key order. Expression keys have no column.
/// What reads across shards need: whether text compares as bytes (the database's collation
/// is C or POSIX (or C.UTF-8, in code point order) by libc, and no column of a user's table has a collation other than the
/// default, C or POSIX), and the names of the aggregate and window functions.
const FACTS: &str = "SELECT (SELECT d.datcollate OPERATOR(pg_catalog.=) ANY (ARRAY['C', 'POSIX', 'C.UTF-8', 'C.utf8']) \
     AND COALESCE(pg_catalog.to_jsonb(d) OPERATOR(pg_catalog.->>) 'datlocprovider', 'c') OPERATOR(pg_catalog.=) 'c' \
     FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) \
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a \
       JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid \
       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
       WHERE a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
       AND a.attcollation OPERATOR(pg_catalog.<>) ALL (ARRAY[0, 100, 950, 951]::pg_catalog.oid[]) \
       AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema']) \
       AND NOT pg_catalog.starts_with(n.nspname::pg_catalog.text, 'pg_toast')), \
     (SELECT pg_catalog.string_agg(DISTINCT p.proname::pg_catalog.text, ' ') FROM pg_catalog.pg_proc p \
       WHERE p.prokind OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'w']::pg_catalog.\"char\"[]))";

/// [`FACTS`]' one row read.
fn facts(rows: Vec<Vec<Option<String>>>) -> Facts {
    let row = rows.into_iter().next().unwrap_or_default();
    let mut cols = row.into_iter();
    let text_bytewise = cols.next().flatten().as_deref() == Some("t");
    let aggregates = cols
        .next()
        .flatten()
        .map(|s| s.split(' ').map(str::to_string).collect())
        .unwrap_or_default();
    Facts {
        aggregates,
        text_bytewise,
    }
}

const HASH_PARTITIONED: &str = "SELECT n.nspname, c.relname, a.attname, \
     pg_catalog.format_type(a.atttypid, NULL), \
     COALESCE((SELECT co.collisdeterministic FROM pg_catalog.pg_collation co WHERE co.oid = k.coll), true), \
     p.partnatts \
     FROM pg_catalog.pg_partitioned_table p \
     JOIN pg_catalog.pg_class c ON c.oid = p.partrelid \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     CROSS JOIN LATERAL unnest(p.partattrs::pg_catalog.int2[], p.partcollation::pg_catalog.oid[]) \
       WITH ORDINALITY AS k(attnum, coll, ord) \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum \
     WHERE p.partstrat = 'h' AND NOT c.relispartition \
     ORDER BY n.nspname, c.relname, k.ord";

/// Sharded tables from [`HASH_PARTITIONED`]'s rows: those whose every key column is one of a
/// supported type (a key with an expression, or of another type, is left out).
fn partitioned_tables(rows: Vec<Vec<Option<String>>>) -> Vec<Table> {
    let mut tables: Vec<(Table, usize, Vec<String>)> = Vec::new();
    let mut unsupported: Vec<String> = Vec::new();
    for row in rows {
        let [Some(schema), Some(rel), Some(col), Some(ty), Some(det), Some(natts)] = &row[..]
        else {
            continue;
        };
        let name = format!("{schema}.{rel}");
        let Some(ty) = KeyType::from_pg_name(ty) else {
            unsupported.push(name);
            continue;
        };
        let natts: usize = natts.parse().unwrap_or(0);
        match tables.iter_mut().find(|(t, _, _)| t.qualified() == name) {
            Some((t, _, bad)) => {
                t.columns.push(col.clone());
                t.types.push(ty);
                if det != "t" {
                    bad.push(col.clone());
                }
            }
            None => {
                let bad = if det != "t" {
                    vec![col.clone()]
                } else {
                    Vec::new()
                };
                tables.push((Table::new(&name, vec![col.clone()], vec![ty]), natts, bad));
            }
        }
    }
    tables
        .into_iter()
        .filter(|(t, natts, _)| t.columns.len() == *natts && !unsupported.contains(&t.qualified()))
        .map(|(mut t, _, bad)| {
            if !bad.is_empty() {
                t.refused = Some(nondeterministic(&t.name, &bad));
            }
            t
        })
        .collect()
}

fn nondeterministic(table: &str, columns: &[String]) -> String {
    format!(
        "sharded table \"{table}\" has key columns under a non-deterministic collation ({}): PostgreSQL hashes their sort keys, which pgcorral cannot compute; name the shard (SET SHARD)",
        columns.join(", ")
    )
}

/// A table's name (its parts quoted as identifiers) as an SQL string literal, for `regclass`.
fn name_literal(t: &Table) -> String {
    let mut name = String::new();
    if let Some(s) = &t.schema {
        session::ident(&mut name, s);
        name.push('.');
    }
    session::ident(&mut name, &t.name);
    let mut out = String::new();
    session::literal(&mut out, &name);
    out
}

/// The shard a comment or `SET` names.
pub fn choose(sharding: &Sharding, choice: &ShardChoice) -> Result<usize, String> {
    match choice {
        ShardChoice::Shard(n) if *n < sharding.shards => Ok(*n),
        ShardChoice::Shard(n) => Err(format!(
            "shard {n} does not exist: the database has shards 0 to {}",
            sharding.shards - 1
        )),
        ShardChoice::Key(k) => sharding.shard_of_text(k).map_err(|e| e.to_string()),
    }
}

fn plan_place(
    plan: &Plan,
    sharding: &Sharding,
    text: &str,
    spans: &[(usize, usize)],
    types: &[u8],
    bind: Option<&[u8]>,
) -> Place {
    let param = |i: usize| bind.and_then(|b| bind_param(b, i, types));
    // Without a Bind (a simple Query; a Parse alone) the key is in the text or nowhere; a
    // Parse and Describe alone are answered alike by every shard.
    if bind.is_none() && plan.has_params() {
        return Place::Any;
    }
    plan.place_in(sharding, text, Some(spans), &param)
}

/// Parameter `i` of a Bind body, `types` the parameter types of its statement's Parse (its
/// count and OIDs).
fn bind_param<'a>(body: &'a [u8], i: usize, types: &[u8]) -> Option<Param<'a>> {
    let bind = BindBody::parse(body)?;
    let value = bind.param(i)?;
    let format = bind.format(i)?;
    let count = types
        .get(..2)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
    let oid = types
        .get(2 + 4 * i..6 + 4 * i)
        .filter(|_| i < usize::from(count))
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    Some(Param {
        value,
        binary: format == 1,
        typed: Typed::of_oid(oid),
    })
}

/// What follows a Parse's query text: its parameter count and types.
fn parse_types<'a>(after_name: &'a [u8], text: &str) -> &'a [u8] {
    after_name.get(text.len() + 1..).unwrap_or(&[])
}

/// A statement parsed in a request: its name, its text and its parameter types.
type Parsed<'a> = (&'a [u8], &'a str, &'a [u8]);

/// A statement of a request: its text, its Parse's parameter types, its Bind's body (extended
/// protocol), and whether it runs.
type Statement<'a> = (&'a str, &'a [u8], Option<&'a [u8]>, bool);

/// The statements of the request at the start of the client's buffer.
struct Batch<'a> {
    /// Bytes up to and including its Sync (or its Query).
    len: usize,
    /// The first message's SQL (for comments).
    first_text: Option<&'a str>,
    /// Each statement: its text, its Bind's body (extended protocol), and whether it runs (a
    /// Query, or bound; else only parsed and described).
    statements: SmallVec<[Statement<'a>; 2]>,
    /// A simple Query.
    simple: bool,
}

impl<'a> Batch<'a> {
    /// A simple Query already read whole: its length and text.
    fn query((len, text): (usize, &'a str)) -> Batch<'a> {
        let mut statements = SmallVec::new();
        statements.push((text, &[][..], None, true));
        Batch {
            len,
            first_text: Some(text),
            statements,
            simple: true,
        }
    }

    /// `None` until the request is whole: its Query, or its messages up to a Sync (or a Flush
    /// after which nothing is bound: the client waits for a description).
    fn read(client: &'a ClientConn) -> Option<Batch<'a>> {
        let buf = &client.buf[..];
        let mut pos = 0;
        let mut batch = Batch {
            len: 0,
            first_text: None,
            statements: SmallVec::new(),
            simple: false,
        };
        // Statements parsed in this request, by name (the unnamed one as ""): their texts and
        // parameter types.
        let mut parsed: SmallVec<[Parsed; 2]> = SmallVec::new();
        let mut bound = false;
        loop {
            let h = Header::parse(&buf[pos..], client.max_len).ok()??;
            if buf.len() - pos < h.total_len() {
                return None;
            }
            let body = &buf[pos + pgwire::header::HEADER_LEN..pos + h.total_len()];
            pos += h.total_len();
            match h.tag {
                frontend::QUERY => {
                    let text = query_text(body);
                    batch.first_text = batch.first_text.or(text);
                    batch
                        .statements
                        .extend(text.map(|t| (t, &[][..], None, true)));
                    batch.len = pos;
                    batch.simple = true;
                    return Some(batch);
                }
                frontend::PARSE => {
                    let name_end = body.iter().position(|&b| b == 0)?;
                    let text = query_text(&body[name_end + 1..]);
                    if batch.first_text.is_none() {
                        batch.first_text = text;
                    }
                    if let Some(t) = text {
                        parsed.retain(|(n, _, _)| *n != &body[..name_end]);
                        parsed.push((&body[..name_end], t, parse_types(&body[name_end + 1..], t)));
                    }
                }
                frontend::BIND => {
                    bound = true;
                    let portal_end = body.iter().position(|&b| b == 0)?;
                    let rest = &body[portal_end + 1..];
                    let name = &rest[..rest.iter().position(|&b| b == 0)?];
                    let text = parsed
                        .iter()
                        .rev()
                        .find(|(n, _, _)| *n == name)
                        .map(|(_, t, types)| (*t, *types))
                        .or_else(|| statement_text(client, name));
                    if batch.first_text.is_none() {
                        batch.first_text = text.map(|t| t.0);
                    }
                    if let Some((t, types)) = text {
                        batch.statements.push((t, types, Some(body), true));
                    }
                }
                frontend::SYNC => {
                    batch.len = pos;
                    // Parsed but never bound: their texts still tell about tables.
                    if !bound {
                        batch
                            .statements
                            .extend(parsed.iter().map(|(_, t, ty)| (*t, *ty, None, false)));
                    }
                    return Some(batch);
                }
                frontend::FLUSH if !bound => {
                    batch.len = pos;
                    batch
                        .statements
                        .extend(parsed.iter().map(|(_, t, ty)| (*t, *ty, None, false)));
                    return Some(batch);
                }
                _ => {}
            }
        }
    }
}

/// The text and parameter types of one of the client's prepared statements (`b""`: its
/// unnamed one).
fn statement_text<'a>(client: &'a ClientConn, name: &[u8]) -> Option<(&'a str, &'a [u8])> {
    let after_name: &[u8] = if name.is_empty() {
        client.statements.unnamed()?
    } else {
        match &client.statements.named(name)?.source {
            prepared::Source::Parse(b) => b,
            prepared::Source::Sql(_) => return None,
        }
    };
    let text = query_text(after_name)?;
    Some((text, parse_types(after_name, text)))
}
