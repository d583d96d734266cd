//! Query routing: where a request goes, as a [`Target`] (which shards of the database, what
//! server role there), for databases with replicas from PostgreSQL's own parser
//! ([`classify`]), comment hints and pgcorral's `SET SERVER ROLE` / `SHOW SERVER ROLE` commands
//! ([`hint`]). A transaction is routed by its first request; everything in it then stays on
//! that server. Every database has one shard today (`Shards::One(0)`); the checkout
//! ([`crate::cluster::Cluster::checkout`]) and the relay take the target as it is.

pub mod classify;
pub mod hint;
pub mod shard;
pub mod tx;

use bytes::{Buf, BytesMut};
use classify::Class;
use hint::{Command, RoleChoice, ShardChoice};
use pgwire::backend::TxStatus;
use pgwire::frontend::{parse_text, query_text};
use pgwire::Header;

use crate::client_conn::ClientConn;
use crate::cluster::topology::RouteSettings;
use crate::cluster::{Cluster, Shards, Target, Want};
use crate::config::DefaultRole;
use crate::error::{Error, Kind, Result};
use crate::prepared;
use crate::prepared::sql;
use crate::rows::{Table, Ty};
use crate::shard::gather::{self, Gather};
use crate::shard::ids::UniqueIds;
use crate::shard::plan::NearPlan;
use crate::shard::scatter;
use crate::shard::Sharding;

/// A client's routing state: its `SET SERVER ROLE`, `SET SHARD` and read-your-writes position.
#[derive(Debug, Clone, Default)]
pub struct ClientRoute {
    /// `None`: the database's default.
    pub role: Option<RoleChoice>,
    /// End of the client's last write in the primary's WAL (read-your-writes); 0 = none.
    pub min_lsn: u64,
    /// The shard `SET SHARD` or `SET SHARDING KEY` chose (sharded databases); `None`: each
    /// request's own keys choose.
    pub shard: Option<usize>,
    /// A transaction opened by a lone BEGIN, waiting for a statement that names its shard.
    pub deferred: Option<Box<tx::Deferred>>,
    /// That BEGIN, to run on the server before the request that placed it.
    pub pending_begin: Option<Box<str>>,
    /// The BEGIN of the client's transaction now running, for each shard it spreads to
    /// (`None`: not begun by a lone BEGIN, and it cannot spread).
    pub tx_begin: Option<Box<str>>,
    /// The transaction now running made a savepoint: it cannot spread to another shard
    /// (rolling back to it would not undo the other shard's work).
    pub savepoints: bool,
    /// The client's transaction was begun by pgcorral on several shards with its first
    /// request: its next request is checked as any inside a transaction.
    pub check_next: bool,
    /// A ReadyForQuery pgcorral owes the client once the request now routed is answered: a
    /// Parse and Describe inside a deferred transaction run outside it, their Sync sent as a
    /// Flush, so the client's ReadyForQuery (in a transaction) comes from pgcorral.
    pub owe_ready: bool,
    /// Where the transaction now running (or the last one) was routed.
    pub target: Option<Target>,
    /// The plan of the client's last request to a sharded database.
    pub near: Option<NearPlan>,
    /// The client's standard_conforming_strings is off (as its server last reported it, or
    /// as it was told at login): a backslash in a plain string literal is an escape.
    pub escapes: bool,
}

/// Whether `params` (ParameterStatus values, or settings) turn standard_conforming_strings off.
pub fn escapes(params: &[(String, String)]) -> bool {
    params
        .iter()
        .any(|(k, v)| k == "standard_conforming_strings" && v == "off")
}

impl ClientRoute {
    /// The transaction status pgcorral's own answers report.
    pub fn status(&self) -> TxStatus {
        self.deferred
            .as_ref()
            .map_or(TxStatus::Idle, |d| d.status())
    }
}

/// What routing shares between all clients: classifications by query text, and the unique
/// ids pgcorral answers.
pub struct Router {
    pub classes: classify::Cache,
    pub ids: UniqueIds,
    /// The node of the ids: the `peer_id` pgcorral started with.
    pub node: u16,
}

impl Router {
    pub fn new(node: u16) -> Router {
        Router {
            classes: Default::default(),
            ids: Default::default(),
            node,
        }
    }
}

/// What to do with the client's next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Check out a server of the target's.
    Route(Target),
    /// pgcorral answers the request (SET/SHOW SERVER ROLE, a refused request), already consumed:
    /// send this, then wait for the next one.
    Reply(BytesMut),
    /// The request is not whole yet (a sharded database's Parse waits for its Bind): read more.
    NeedMore,
    /// The shards' catalogs are to be read first ([`shard::read_catalog`]), then decide again.
    ReadCatalog,
    /// Sharded table `n`'s columns are to be read first ([`shard::learn_columns`]), then decide
    /// again.
    LearnColumns(usize),
    /// `COPY ... FROM STDIN` into sharded table `n` (its index): its rows go to their shards;
    /// `true`: the first statement of the client's transaction (begun alone), which begins on
    /// every shard.
    CopyIn(usize, bool),
    /// An `INSERT ... VALUES` whose rows are on several shards: each row's shard, in order;
    /// `true`: the first statement of the client's transaction (begun alone), which begins on
    /// those shards.
    SplitInsert(Vec<usize>, bool),
    /// A `COMMIT PREPARED` or `ROLLBACK PREPARED` of a gid pgcorral does not know: the shards
    /// are to be asked which holds it ([`shard::find_gid`]), then decide again.
    FindGid(String),
    /// A read that no one shard answers: asked of every shard, the answers merged.
    Gather(Box<Gathered>),
    /// A `COMMIT PREPARED` or `ROLLBACK PREPARED` (a simple Query of `len` bytes) of a
    /// transaction prepared on these shards together: run on each.
    FinishPrepared(Vec<usize>, usize),
    /// A write that no one shard takes: run on each shard it touches, committed atomically.
    Scatter(Box<Scattered>),
    /// An extended-protocol request whose statements are on several shards (each Bind's
    /// shard, in order): split between them, committed atomically; or (`true`) the first
    /// request of the client's transaction (begun alone, [`ClientRoute::tx_begin`]), which
    /// begins on those shards.
    SplitPipeline(Vec<Vec<usize>>, bool),
}

/// A write across shards, as [`decide`] placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scattered {
    /// The shards it runs on.
    pub shards: Vec<usize>,
    /// Those the client's statement is sent to (the others take moved rows).
    pub from: Vec<usize>,
    /// The first statement of the client's transaction (begun alone): it begins on the shards.
    pub begins: bool,
    pub write: scatter::Write,
    /// Bytes of the client's request.
    pub len: usize,
    /// The request is an extended-protocol one binding this statement (else a simple Query).
    pub extended: Option<Box<str>>,
}

/// A read across shards, as [`decide`] placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathered {
    pub plan: Gather,
    /// The shards to ask, and the server each needs.
    pub shards: Vec<usize>,
    pub want: Want,
    /// Bytes of the client's request.
    pub len: usize,
    /// The request is an extended-protocol one (else a simple Query).
    pub extended: bool,
    /// The first statement of the client's transaction (begun alone): it begins on the
    /// shards.
    pub begins: bool,
    /// Text compares as bytes in the database (see [`crate::shard::Facts`]).
    pub text_bytewise: bool,
}

/// Decides where the request at the start of `client.buf` goes. Nothing here waits: what needs
/// a server first (the catalog, a table's columns) is asked for, and the caller decides again.
pub fn decide(
    client: &mut ClientConn,
    cluster: &Cluster,
    router: &Router,
    route: &mut ClientRoute,
) -> Decision {
    let cache = &router.classes;
    let settings = cluster.topology().settings();
    let sharding = cluster.sharding_now();
    let sharding = sharding.as_deref().map(|s| &**s);
    let status = route.status();
    // A whole simple Query's length and text, read once.
    let query = whole_query(client);
    if let Some((len, answer)) =
        query.and_then(|q| own_command(q, route, (&settings, router), sharding, status))
    {
        client.buf.advance(len);
        return Decision::Reply(answer);
    }
    let hinted = match query {
        Some((_, text)) => hint::comment_hint(text),
        None => first_text(client).and_then(hint::comment_hint),
    };
    let choice = hinted.or(route.role).unwrap_or(RoleChoice::Default);
    let by_parser = |client: &ClientConn| match classify_batch(client, cache, &settings) {
        Class::Write => Decision::Route(Target::first_shard(Want::Primary, true)),
        Class::Read | Class::ReadOnlyBegin => {
            Decision::Route(Target::first_shard(Want::Read, false))
        }
    };
    let fixed = |want: Want| Decision::Route(Target::first_shard(want, want == Want::Primary));
    let decision = match choice {
        // A sharded database whose shards have one server each: only the shard is chosen.
        _ if sharding.is_some() && !cluster.has_roles() => {
            Decision::Route(Target::first_shard(Want::Primary, false))
        }
        RoleChoice::Primary => fixed(Want::Primary),
        RoleChoice::Replica => fixed(Want::Replica),
        RoleChoice::Any => fixed(Want::Any),
        RoleChoice::Auto => by_parser(client),
        RoleChoice::Default => match settings.default_role {
            DefaultRole::Primary => fixed(Want::Primary),
            DefaultRole::Replica => fixed(Want::Replica),
            DefaultRole::Any if settings.query_parser_enabled => by_parser(client),
            DefaultRole::Any => fixed(Want::Any),
        },
    };
    let (Some(sharding), Decision::Route(target)) = (sharding, &decision) else {
        return decision;
    };
    on_shards(client, (router, &settings), route, sharding, *target)
}

/// [`decide`] for a sharded database, once the role is chosen (`target`): the catalog read
/// first, pgcorral's own transaction commands, the shard or shards of the request, a request
/// across shards, a prepared transaction found.
fn on_shards(
    client: &mut ClientConn,
    (router, settings): (&Router, &RouteSettings),
    route: &mut ClientRoute,
    sharding: &Sharding,
    mut target: Target,
) -> Decision {
    let cache = &router.classes;
    // The whole simple Query's length and text, read again.
    let query = whole_query(client);
    if !sharding.checked {
        return Decision::ReadCatalog;
    }
    if let Some((len, answer)) = query.and_then(|q| transaction_command(q, route)) {
        client.buf.advance(len);
        return Decision::Reply(answer);
    }
    if route.deferred.as_ref().is_some_and(|d| d.failed) {
        let Some(len) = shard::request_len(client) else {
            return Decision::NeedMore;
        };
        client.buf.advance(len);
        let mut out = BytesMut::new();
        tx::aborted(&mut out);
        pgwire::encode::ready_for_query(&mut out, TxStatus::Failed);
        return Decision::Reply(out);
    }
    let writes = || classify_batch(client, cache, settings) == Class::Write;
    let chosen = route
        .deferred
        .as_ref()
        .and_then(|d| d.shard)
        .or(route.shard);
    let near = (&mut route.near, route.escapes);
    let placed = shard::shard_of(client, query, sharding, near, chosen, writes);
    if let shard::Shard::NeedColumns(t) = placed {
        return Decision::LearnColumns(t);
    }
    let bound = || shard::bound_text(client);
    match across_shards(
        route,
        sharding,
        &placed,
        (query, bound),
        target.want,
        writes,
    ) {
        Ok(None) => {}
        Ok(Some(d)) => {
            let begins = match &d {
                Decision::Scatter(s) => s.begins,
                Decision::Gather(g) => g.begins,
                _ => false,
            };
            {
                if let Some(d) = route.deferred.take().filter(|_| begins) {
                    route.tx_begin = Some(d.begin.into_boxed_str());
                    route.savepoints = false;
                }
            }
            return d;
        }
        Err((len, msg)) => return refuse(client, route, len, &msg),
    }
    // Two-phase commit: a prepared transaction is finished on the shard that holds it (a
    // shard the client named wins, as for any statement).
    let text = query.map(|q| q.1).or_else(|| first_text(client));
    let two_phase = text.and_then(|t| tx::two_phase(t, route.escapes));
    let placed = match (placed, &two_phase) {
        (shard::Shard::Any, Some(tx::TwoPhase::Finish(gid))) => {
            if let (Some(shards), Some((len, _))) = (sharding.gids.take_together(gid), query) {
                return Decision::FinishPrepared(shards, len);
            }
            match sharding.gids.take(gid) {
                Some(n) => shard::Shard::One(n),
                None => return Decision::FindGid(gid.clone()),
            }
        }
        (p, _) => p,
    };
    // A deferred transaction is placed by a request that runs a statement: a Parse and
    // Describe alone go to any shard, outside it.
    let places = !(route.deferred.is_some() && shard::runs_nothing(client));
    if !places {
        if let Some(len) = shard::request_len(client) {
            if len >= 5 && client.buf[len - 5] == pgwire::frontend::SYNC {
                client.buf[len - 5] = pgwire::frontend::FLUSH;
                route.owe_ready = true;
            }
        }
    }
    let refused = match placement(client, route, (sharding, placed), places) {
        Ok(r) => r,
        Err(d) => return d,
    };
    match refused {
        Ok(n) => {
            if let Some(tx::TwoPhase::Prepare(gid)) = &two_phase {
                sharding.gids.note(gid, n);
            }
            if let Some(d) = route.deferred.take_if(|_| places) {
                route.pending_begin = Some(d.begin.into_boxed_str());
                route.tx_begin = route.pending_begin.clone();
            } else {
                // A request that begins with a BEGIN statement of its own (a driver's
                // extended-protocol BEGIN): the transaction may spread with that BEGIN; any
                // other transaction it opens stays on its shard.
                route.tx_begin = shard::batch_texts(client)
                    .and_then(|t| t.first().copied())
                    .filter(|t| matches!(tx::command(t), Some(tx::TxCommand::Begin(_))))
                    .map(Box::from);
            }
            route.savepoints = false;
            target.shards = Shards::One(n);
            Decision::Route(target)
        }
        Err((len, msg)) => refuse(client, route, len, &msg),
    }
}

/// Where a request placed as `placed` goes when no request across shards took it: `Ok` its
/// shard, or why it is refused (bytes of the request, the message); `Err` a decision of its
/// own (a split request, more to read, columns to learn). `places`: it runs a statement (a
/// deferred transaction begins with it).
fn placement(
    client: &ClientConn,
    route: &mut ClientRoute,
    (sharding, placed): (&Sharding, shard::Shard),
    places: bool,
) -> std::result::Result<std::result::Result<usize, (usize, String)>, Decision> {
    Ok(match placed {
        shard::Shard::One(n) => Ok(n),
        shard::Shard::Any => Ok(sharding.plans.any_shard(sharding.shards)),
        shard::Shard::NoKey(len, why) => sharding.default_shard.ok_or((len, why)),
        shard::Shard::Refused(len, why) => Err((len, why)),
        // Answered above, else refused there.
        shard::Shard::Several(len, _, why)
        | shard::Shard::Omni(len, why)
        | shard::Shard::MovesKey(len, _, _, why) => Err((len, why)),
        shard::Shard::NeedMore => return Err(Decision::NeedMore),
        shard::Shard::CopyIn(t) if route.deferred.as_ref().is_none_or(|_| places) => {
            // The first statement of a transaction begun alone: it begins on every shard.
            let begins = route.deferred.take().map(|d| {
                route.tx_begin = Some(d.begin.into_boxed_str());
                route.savepoints = false;
            });
            return Err(Decision::CopyIn(t, begins.is_some()));
        }
        shard::Shard::Pipeline(_, shards) => {
            // The first request of a transaction begun alone: it begins on those shards.
            let begins = route.deferred.take().map(|d| {
                route.tx_begin = Some(d.begin.into_boxed_str());
                route.savepoints = false;
            });
            return Err(Decision::SplitPipeline(shards, begins.is_some()));
        }
        shard::Shard::SplitInsert(rows) if route.deferred.as_ref().is_none_or(|_| places) => {
            // The first statement of a transaction begun alone: it begins on the rows' shards.
            let begins = route.deferred.take().map(|d| {
                route.tx_begin = Some(d.begin.into_boxed_str());
                route.savepoints = false;
            });
            return Err(Decision::SplitInsert(rows, begins.is_some()));
        }
        shard::Shard::SplitInsert(_) => Err((
            shard::request_len(client).unwrap_or(0),
            "an INSERT whose rows are on several shards is split to the shards outside a transaction only".to_string(),
        )),
        shard::Shard::CopyIn(_) => Err((
            shard::request_len(client).unwrap_or(0),
            "COPY FROM STDIN into a sharded table is split to the shards outside a transaction only".to_string(),
        )),
        // Returned above, before the request's Sync could be changed.
        shard::Shard::NeedColumns(t) => return Err(Decision::LearnColumns(t)),
    })
}

/// The answer to `SELECT pgcorral.unique_id()`: one int8 column, one row.
fn unique_id(out: &mut BytesMut, id: i64) {
    Table::new(&[("unique_id", Ty::Int)]).describe(out);
    let text = id.to_string();
    pgwire::encode::message(out, pgwire::backend::DATA_ROW, |b| {
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&(text.len() as i32).to_be_bytes());
        b.extend_from_slice(text.as_bytes());
    });
    pgwire::encode::command_complete(out, "SELECT 1");
}

/// A request no one shard takes, when it can run on several (outside a transaction, for now):
/// a read asked of the shards it may touch (a simple Query, or an extended-protocol request of
/// one statement: `bound` gives its text), a write (a simple Query) run on them in one atomic
/// transaction; `Err`: refused (bytes of the request, the message). `None`: it goes to one
/// shard (the default shard).
fn across_shards<'a>(
    route: &ClientRoute,
    sharding: &Sharding,
    placed: &shard::Shard,
    (query, bound): (Option<(usize, &str)>, impl FnOnce() -> Option<&'a str>),
    want: Want,
    writes: impl FnOnce() -> bool,
) -> std::result::Result<Option<Decision>, (usize, String)> {
    let all = || (0..sharding.shards).collect::<Vec<_>>();
    let keyless = |len: usize, why: &String| (all(), len, why.clone());
    // The first statement of a transaction begun alone: a write begins it on its shards.
    let begins = route.deferred.is_some();
    let (mut shards, len, why) = match placed {
        shard::Shard::NoKey(len, why) => keyless(*len, why),
        shard::Shard::Omni(len, why) => keyless(*len, why),
        shard::Shard::Several(len, shards, why) => (shards.clone(), *len, why.clone()),
        shard::Shard::MovesKey(..) => {
            // The rows go wherever their new keys say: every shard takes part.
            return match moving(placed, sharding, (query, bound), route.escapes) {
                Ok(mut s) => {
                    s.begins = begins;
                    Ok(Some(Decision::Scatter(Box::new(s))))
                }
                Err(e) => Err(e),
            };
        }
        _ => return Ok(None),
    };
    let default = matches!(placed, shard::Shard::NoKey(..))
        .then_some(sharding.default_shard)
        .flatten();
    // A simple Query, or an extended-protocol request binding one statement.
    let (len, text, extended) = match (query, bound()) {
        (Some((len, text)), _) => (len, text, false),
        (None, Some(text)) => (len, text, true),
        (None, None) if default.is_some() => return Ok(None),
        (None, None) => {
            let msg = format!(
                "{why} (a request across shards is answered when it binds one statement, for now)"
            );
            return Err((len, msg));
        }
    };
    // The default shard takes keyless reads without a second parse.
    if default.is_some() && !writes() {
        return Ok(None);
    }
    // A write: DDL and omnisharded copies go to every shard whatever the default shard.
    match scatter::plan(sharding, text, route.escapes) {
        Ok(Some(write)) if default.is_none() || write.every_shard() => {
            if write.every_shard() {
                shards = all();
            }
            return Ok(Some(Decision::Scatter(Box::new(Scattered {
                from: shards.clone(),
                shards,
                write,
                len,
                begins,
                extended: extended.then(|| text.into()),
            }))));
        }
        Ok(Some(_)) => return Ok(None),
        Err(_) if default.is_some() => return Ok(None),
        Err(msg) => return Err((len, msg)),
        Ok(None) if default.is_some() => return Ok(None),
        // Reads of omnisharded tables go to any one shard: this one may write.
        Ok(None) if matches!(placed, shard::Shard::Omni(..)) => return Err((len, why)),
        Ok(None) => {}
    }
    let msg = match gather::plan(sharding, text, route.escapes, &sharding.facts.aggregates) {
        Ok(plan) => {
            let g = gathered(sharding, plan, (shards, want), (len, extended), begins);
            return Ok(Some(Decision::Gather(Box::new(g))));
        }
        Err(msg) if msg == gather::NOT_A_READ => why,
        Err(msg) => msg,
    };
    Err((len, msg))
}

/// A read across shards as `plan` says, on `shards` (a server `want` of each): the client's
/// request is `len` bytes, a simple Query or (`extended`) an extended-protocol request;
/// `begins`: the first statement of the client's transaction (begun alone).
fn gathered(
    sharding: &Sharding,
    mut plan: Gather,
    (shards, want): (Vec<usize>, Want),
    (len, extended): (usize, bool),
    begins: bool,
) -> Gathered {
    plan.max_groups = sharding.max_gather_groups;
    Gathered {
        plan,
        shards,
        want,
        len,
        extended,
        begins,
        text_bytewise: sharding.facts.text_bytewise,
    }
}

/// An UPDATE that assigns a sharding key (`placed`), as a write across shards: every shard
/// takes part (moved rows go wherever their new keys say); a simple Query, or an
/// extended-protocol request binding the one statement (`bound` gives its text, which the
/// shards run rewritten). `Err`: refused.
fn moving<'a>(
    placed: &shard::Shard,
    sharding: &Sharding,
    (query, bound): (Option<(usize, &str)>, impl FnOnce() -> Option<&'a str>),
    escapes: bool,
) -> std::result::Result<Scattered, (usize, String)> {
    let shard::Shard::MovesKey(len, table, from, why) = placed else {
        return Err((0, "not an UPDATE of a sharding key".into()));
    };
    if escapes {
        return Err((*len, why.clone()));
    }
    let (len, extended) = match (query, bound()) {
        (Some((len, text)), _) => {
            scatter::moved(text).map_err(|msg| (len, msg))?;
            (len, None)
        }
        (None, Some(text)) => {
            let rewritten = scatter::moving(text).map_err(|msg| (*len, msg))?;
            (*len, Some(rewritten.into()))
        }
        (None, None) => return Err((*len, why.clone())),
    };
    let all: Vec<usize> = (0..sharding.shards).collect();
    Ok(Scattered {
        from: if from.is_empty() {
            all.clone()
        } else {
            from.clone()
        },
        shards: all,
        write: scatter::Write::MovesKey(*table),
        len,
        begins: false,
        extended,
    })
}

/// A request inside a transaction that no one shard takes (no key and no default shard, keys
/// on several shards, an omnisharded write, a key moved): a write run on the shards it
/// touches, or a read asked of them (a simple Query, or an extended-protocol request of one
/// statement: `bound` gives its text), as the transaction spreads to them; else refused.
fn across_in_transaction<'a>(
    route: &ClientRoute,
    sharding: &Sharding,
    placed: &shard::Shard,
    (query, bound): (Option<(usize, &str)>, impl FnOnce() -> Option<&'a str>),
) -> Option<std::result::Result<InTransaction, (usize, String)>> {
    let (len, why, several) = match placed {
        shard::Shard::NoKey(len, why) if sharding.default_shard.is_none() => (*len, why, None),
        shard::Shard::Omni(len, why) => (*len, why, None),
        shard::Shard::Several(len, shards, why) => (*len, why, Some(shards)),
        shard::Shard::MovesKey(len, _, _, why) => (*len, why, None),
        _ => return None,
    };
    if route.tx_begin.is_none() || route.savepoints {
        return Some(Err((
            len,
            format!("{why} (the transaction cannot spread to other shards: it made a savepoint, or was not begun by a BEGIN of its own)"),
        )));
    }
    let scattered = |s: Scattered| InTransaction::Scatter(Box::new(s));
    if matches!(placed, shard::Shard::MovesKey(..)) {
        return Some(moving(placed, sharding, (query, bound), route.escapes).map(scattered));
    }
    let shards = || match several {
        Some(s) => s.clone(),
        None => (0..sharding.shards).collect(),
    };
    let read = |text: &str, extended: bool| {
        let plan = gather::plan(sharding, text, route.escapes, &sharding.facts.aggregates);
        match plan {
            Ok(plan) => {
                let on = (shards(), Want::Primary);
                let g = gathered(sharding, plan, on, (len, extended), false);
                Ok(InTransaction::Gather(Box::new(g)))
            }
            Err(msg) if msg == gather::NOT_A_READ => Err((len, why.clone())),
            Err(msg) => Err((len, msg)),
        }
    };
    // A simple Query, or an extended-protocol request binding one statement.
    let (len, text, extended) = match (query, bound()) {
        (Some((len, text)), _) => (len, text, false),
        (None, Some(text)) => (len, text, true),
        (None, None) => {
            let msg = format!(
                "{why} (a request across shards is answered when it binds one statement, for now)"
            );
            return Some(Err((len, msg)));
        }
    };
    Some(match scatter::plan(sharding, text, route.escapes) {
        Ok(Some(write)) => {
            let shards = match (several, write.every_shard()) {
                (Some(s), false) => s.clone(),
                _ => (0..sharding.shards).collect(),
            };
            Ok(scattered(Scattered {
                from: shards.clone(),
                shards,
                write,
                len,
                begins: false,
                extended: extended.then(|| text.into()),
            }))
        }
        // A write of omnisharded tables that pgcorral does not see as one (a function).
        Ok(None) if matches!(placed, shard::Shard::Omni(..)) => Err((len, why.clone())),
        Ok(None) => read(text, extended),
        Err(msg) => Err((len, msg)),
    })
}

/// pgcorral's refusal of the client's request (`len` bytes, consumed): an ERROR, and its
/// deferred transaction, if any, failed.
fn refuse(client: &mut ClientConn, route: &mut ClientRoute, len: usize, msg: &str) -> Decision {
    client.buf.advance(len);
    if let Some(d) = &mut route.deferred {
        d.failed = true;
    }
    let mut out = BytesMut::new();
    pgwire::encode::error_response(&mut out, "ERROR", "0A000", msg);
    pgwire::encode::ready_for_query(&mut out, route.status());
    Decision::Reply(out)
}

/// What the client's request needs from a server before [`decide`] can place it: the shards'
/// catalogs, or a sharded table's columns (an INSERT without a column list). `Ok(false)`: the
/// columns could not be read (the table does not exist yet), and the request is refused.
pub async fn learn(
    client: &mut ClientConn,
    cluster: &Cluster,
    route: &mut ClientRoute,
    need: &Decision,
    tried: &mut bool,
) -> Result<Option<BytesMut>> {
    let Some(sharding) = cluster.sharding() else {
        return Ok(None);
    };
    match *need {
        Decision::ReadCatalog => {
            // The shards' catalogs, once: key collations, and hash-partitioned tables.
            shard::read_catalog(cluster, &sharding, client.worker).await?;
            Ok(None)
        }
        Decision::LearnColumns(t) if !*tried => {
            *tried = true;
            let mut sharding = sharding;
            for _ in 0..3 {
                shard::learn_columns(cluster, &sharding, t, client.worker).await?;
                // Another client's catalog read may have replaced the sharding meanwhile (its
                // plans start empty): learn into the one in force.
                match cluster.sharding() {
                    Some(now) if !std::sync::Arc::ptr_eq(&now, &sharding) => sharding = now,
                    _ => break,
                }
            }
            Ok(None)
        }
        Decision::FindGid(ref gid) => {
            shard::find_gid(cluster, &sharding, gid, client.worker).await?;
            Ok(None)
        }
        _ => {
            // Read once already, and still unknown.
            let len = shard::request_len(client).unwrap_or(0);
            client.buf.advance(len);
            if let Some(d) = &mut route.deferred {
                d.failed = true;
            }
            let mut out = BytesMut::new();
            pgwire::encode::error_response(&mut out, "ERROR", "0A000", "an INSERT without a column list into a sharded table whose columns could not be read from shard 0's catalog (does the table exist?): name the columns");
            pgwire::encode::ready_for_query(&mut out, route.status());
            Ok(Some(out))
        }
    }
}

/// pgcorral's answer to a lone transaction command on a sharded database (`query`: the whole
/// simple Query's length and text): a BEGIN that no shard is chosen for yet is deferred, and the
/// commands of a deferred transaction answered. The caller consumes the Query.
fn transaction_command(
    (len, text): (usize, &str),
    route: &mut ClientRoute,
) -> Option<(usize, BytesMut)> {
    let cmd = tx::command(text)?;
    let begins_unplaced = matches!(cmd, tx::TxCommand::Begin(_))
        && route.shard.is_none()
        && hint::comment_shard(text).is_none();
    if route.deferred.is_none() && !begins_unplaced {
        return None;
    }
    let mut out = BytesMut::new();
    tx::answer(cmd, &mut route.deferred, text, &mut out);
    Some((len, out))
}

/// A whole simple Query at the start of the client's buffer: its length and text.
fn whole_query(client: &ClientConn) -> Option<(usize, &str)> {
    let h = Header::parse(&client.buf, client.max_len).ok()??;
    if h.tag != b'Q' || client.buf.len() < h.total_len() {
        return None;
    }
    let text = query_text(&client.buf[pgwire::header::HEADER_LEN..h.total_len()])?;
    Some((h.total_len(), text))
}

/// What a batch inside a sharded database's transaction (on `shard`) may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InTransaction {
    /// Go on the transaction's server.
    Go,
    /// pgcorral answered it (its own commands).
    Answered,
    /// It needs another shard (or several): the transaction fails with this message; the
    /// request (its bytes at the front of the buffer) is consumed.
    Fail(String),
    /// Read more of it.
    NeedMore,
    /// It goes to shard `n`: the transaction spreads there (the request is left to run).
    Switch(usize),
    /// Its statements are on these shards (each Bind's, in order): the transaction spreads
    /// to them and the request is split between them.
    Pipeline(Vec<Vec<usize>>),
    /// The transaction spans shards and this is its lone `PREPARE TRANSACTION` (left to run
    /// on the current shard): pgcorral prepares the other shards' parts with the same gid.
    Prepare(String),
    /// A write no one shard takes: run on the shards it touches as the transaction spreads.
    Scatter(Box<Scattered>),
    /// A read no one shard answers: asked of the shards it may touch as the transaction
    /// spreads to them.
    Gather(Box<Gathered>),
    /// An INSERT whose rows are on these shards (each row's, in order): the transaction
    /// spreads to them and the INSERT is split between them.
    SplitInsert(Vec<usize>),
    /// A `COPY ... FROM STDIN` into sharded table `n`: the transaction spreads to every
    /// shard and the rows are split between them.
    CopyIn(usize),
    /// The transaction spans shards and this ends it (a lone COMMIT, END, ROLLBACK or
    /// ABORT in a simple Query, left to run on the current shard): pgcorral ends the other
    /// shards' parts with it.
    End(tx::TxCommand),
}

/// Checks the client's next batch inside a transaction on `shard` of a sharded database;
/// `spanning`: the transaction has spread to other shards.
pub async fn in_transaction(
    client: &mut ClientConn,
    (cluster, router): (&Cluster, &Router),
    route: &mut ClientRoute,
    (shard, spanning): (usize, bool),
    status: TxStatus,
) -> Result<InTransaction> {
    let Some(sharding) = cluster.sharding() else {
        return Ok(InTransaction::Go);
    };
    let sharding = &*sharding;
    if let Some(done) =
        answered_here(client, (cluster, router), route, sharding, (shard, status)).await?
    {
        return Ok(done);
    }
    // A whole simple Query's length and text, read once.
    let query = whole_query(client);
    let settings = cluster.topology().settings();
    // Savepoints and the end of a transaction, in the client's own statements (a function
    // cannot make or end either): a transaction across shards ends by a lone COMMIT or
    // ROLLBACK that pgcorral sees, and never spreads past a savepoint.
    let control = shard::batch_texts(client).map(|texts| tx::control(&texts, route.escapes));
    if let Some((savepoint, ends)) = control {
        route.savepoints |= savepoint;
        if spanning && (savepoint || ends) {
            let lone = query.and_then(|(_, t)| tx::command(t));
            let prepare = query.and_then(|(_, t)| tx::two_phase(t, route.escapes));
            let len = shard::request_len(client).unwrap_or(0);
            return Ok(match (lone, prepare) {
                (Some(cmd @ (tx::TxCommand::Commit | tx::TxCommand::Rollback)), _)
                    if !savepoint =>
                {
                    InTransaction::End(cmd)
                }
                (_, Some(tx::TwoPhase::Prepare(gid))) if !savepoint => InTransaction::Prepare(gid),
                _ => {
                    client.buf.advance(len);
                    InTransaction::Fail(
                        "a transaction across shards takes no savepoints, and ends by a lone COMMIT, ROLLBACK or PREPARE TRANSACTION in a simple query".into(),
                    )
                }
            });
        }
    }
    // A shard the client chose keeps the transaction where it is; else its keys must agree.
    let chosen = route.shard.map(|_| shard);
    let escapes = route.escapes;
    let writes = || classify_batch(client, &router.classes, &settings) == Class::Write;
    let mut placed = shard::shard_of(
        client,
        query,
        sharding,
        (&mut route.near, escapes),
        chosen,
        writes,
    );
    if let shard::Shard::NeedColumns(t) = placed {
        shard::learn_columns(cluster, sharding, t, client.worker).await?;
        let near = (&mut route.near, escapes);
        placed = shard::shard_of(client, query, sharding, near, chosen, writes);
    }
    let bound = || shard::bound_text(client);
    match across_in_transaction(route, sharding, &placed, (query, bound)) {
        None => {}
        Some(Ok(t)) => return Ok(t),
        Some(Err((len, msg))) => {
            client.buf.advance(len);
            return Ok(InTransaction::Fail(msg));
        }
    }
    Ok(match placed {
        shard::Shard::One(n) if n != shard && route.tx_begin.is_some() && !route.savepoints => {
            InTransaction::Switch(n)
        }
        shard::Shard::One(n) if n != shard => {
            let len = shard::request_len(client).unwrap_or(0);
            client.buf.advance(len);
            let why = match route.savepoints {
                true => "it made a savepoint, and rolling back to it would not undo another shard's work",
                false => "it was not begun by a BEGIN of its own (sent alone)",
            };
            InTransaction::Fail(format!(
                "the transaction is on shard {shard}, and this request's key is on shard {n}: the transaction cannot spread to another shard because {why}"
            ))
        }
        shard::Shard::Refused(len, msg) => {
            client.buf.advance(len);
            InTransaction::Fail(msg)
        }
        shard::Shard::Pipeline(_, shards) if route.tx_begin.is_some() && !route.savepoints => {
            InTransaction::Pipeline(shards)
        }
        shard::Shard::SplitInsert(rows) if route.tx_begin.is_some() && !route.savepoints => {
            InTransaction::SplitInsert(rows)
        }
        shard::Shard::CopyIn(t) if route.tx_begin.is_some() && !route.savepoints => {
            InTransaction::CopyIn(t)
        }
        shard::Shard::CopyIn(_) | shard::Shard::SplitInsert(_) | shard::Shard::Pipeline(..) => {
            let len = shard::request_len(client).unwrap_or(0);
            client.buf.advance(len);
            InTransaction::Fail(
                "a request split between shards (COPY FROM STDIN, an INSERT of rows on several shards, statements of one request on several shards) runs outside a transaction only".into(),
            )
        }
        shard::Shard::NeedMore => InTransaction::NeedMore,
        _ => {
            // A PREPARE TRANSACTION ends the transaction here: its gid is on this shard.
            let text = query.map(|q| q.1).or_else(|| first_text(client));
            if let Some(tx::TwoPhase::Prepare(gid)) =
                text.and_then(|t| tx::two_phase(t, route.escapes))
            {
                sharding.gids.note(&gid, shard);
            }
            InTransaction::Go
        }
    })
}

/// What pgcorral answers itself inside a transaction on `shard` (its status `status`): `SHOW
/// SHARD`, a `SET SHARD` or `SET SHARDING KEY` naming the transaction's shard (another fails
/// it), and its own commands; `None`: none of these.
async fn answered_here(
    client: &mut ClientConn,
    (cluster, router): (&Cluster, &Router),
    route: &mut ClientRoute,
    sharding: &Sharding,
    (shard, status): (usize, TxStatus),
) -> Result<Option<InTransaction>> {
    let query = whole_query(client);
    if let Some((len, text)) = query {
        let command = hint::command(text);
        if command == Ok(Some(Command::ShowShard)) {
            client.buf.advance(len);
            let mut out = BytesMut::new();
            let mut t = Table::text(&["shard"]);
            t.row(vec![shard.to_string().into()]);
            t.describe(&mut out);
            t.rows(&mut out);
            pgwire::encode::ready_for_query(&mut out, status);
            send(client, &out).await?;
            return Ok(Some(InTransaction::Answered));
        }
        let named = match command {
            Ok(Some(Command::SetShard(Some(n)))) => {
                Some(shard::choose(sharding, &ShardChoice::Shard(n)))
            }
            Ok(Some(Command::SetShardingKey(k))) => {
                Some(shard::choose(sharding, &ShardChoice::Key(k)))
            }
            _ => None,
        };
        if let Some(named) = named {
            client.buf.advance(len);
            return Ok(Some(match named {
                Ok(n) if n == shard => {
                    let mut out = BytesMut::new();
                    pgwire::encode::command_complete(&mut out, "SET");
                    pgwire::encode::ready_for_query(&mut out, status);
                    send(client, &out).await?;
                    InTransaction::Answered
                }
                Ok(n) => InTransaction::Fail(format!(
                    "the transaction is on shard {shard}: it cannot move to shard {n} (a transaction stays on one shard)"
                )),
                Err(msg) => InTransaction::Fail(msg),
            }));
        }
    }
    let settings = cluster.topology().settings();
    if let Some((len, answer)) =
        query.and_then(|q| own_command(q, route, (&settings, router), Some(sharding), status))
    {
        client.buf.advance(len);
        send(client, &answer).await?;
        return Ok(Some(InTransaction::Answered));
    }
    Ok(None)
}

async fn send(client: &mut ClientConn, out: &[u8]) -> Result<()> {
    client
        .stream
        .send(out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}

/// The SQL of the first message, when it is a complete Query or Parse.
fn first_text(client: &ClientConn) -> Option<&str> {
    let h = Header::parse(&client.buf, client.max_len).ok()??;
    let body = client.buf.get(pgwire::header::HEADER_LEN..h.total_len())?;
    match h.tag {
        b'Q' => query_text(body),
        b'P' => parse_text(body),
        _ => None,
    }
}

/// Answers `SET SERVER ROLE` / `SHOW SERVER ROLE` (a whole simple Query), and for a sharded
/// database `SET SHARD`, `SET SHARDING KEY` and `SHOW SHARD` (`query`: the whole simple
/// Query's length and text). The caller consumes the Query.
fn own_command(
    (len, text): (usize, &str),
    route: &mut ClientRoute,
    (settings, router): (&RouteSettings, &Router),
    sharding: Option<&Sharding>,
    status: TxStatus,
) -> Option<(usize, BytesMut)> {
    let mut out = BytesMut::new();
    if sharding.is_some() && hint::unique_id(text) {
        unique_id(&mut out, router.ids.next(router.node));
        pgwire::encode::ready_for_query(&mut out, status);
        return Some((len, out));
    }
    let command = hint::command(text);
    let shard_command = matches!(
        command,
        Ok(Some(
            Command::SetShard(_) | Command::SetShardingKey(_) | Command::ShowShard
        ))
    );
    if shard_command && sharding.is_none() {
        // Not pgcorral's on a database that is not sharded: PostgreSQL answers it.
        return None;
    }
    match command {
        Ok(None) => return None,
        Ok(Some(Command::SetRole(choice))) => {
            route.role = (choice != RoleChoice::Default).then_some(choice);
            pgwire::encode::command_complete(&mut out, "SET");
        }
        Ok(Some(Command::ShowRole)) => {
            let mut t = Table::text(&["server_role"]);
            t.row(vec![role_name(route.role, settings).into()]);
            t.describe(&mut out);
            t.rows(&mut out);
        }
        Ok(Some(Command::SetShard(n))) => {
            let sharding = sharding.expect("checked");
            match n
                .map(|n| shard::choose(sharding, &ShardChoice::Shard(n)))
                .transpose()
            {
                // Inside a deferred transaction: for that transaction only.
                Ok(n) if route.deferred.is_some() => {
                    route.deferred.as_mut().expect("checked").shard = n;
                    pgwire::encode::command_complete(&mut out, "SET");
                }
                Ok(n) => {
                    route.shard = n;
                    pgwire::encode::command_complete(&mut out, "SET");
                }
                Err(msg) => pgwire::encode::error_response(&mut out, "ERROR", "22023", &msg),
            }
        }
        Ok(Some(Command::SetShardingKey(key))) => {
            let sharding = sharding.expect("checked");
            match shard::choose(sharding, &ShardChoice::Key(key)) {
                Ok(n) if route.deferred.is_some() => {
                    route.deferred.as_mut().expect("checked").shard = Some(n);
                    pgwire::encode::command_complete(&mut out, "SET");
                }
                Ok(n) => {
                    route.shard = Some(n);
                    pgwire::encode::command_complete(&mut out, "SET");
                }
                Err(msg) => pgwire::encode::error_response(&mut out, "ERROR", "22023", &msg),
            }
        }
        Ok(Some(Command::ShowShard)) => {
            let mut t = Table::text(&["shard"]);
            let shown = route
                .shard
                .map_or_else(|| "auto".to_string(), |n| n.to_string());
            t.row(vec![shown.into()]);
            t.describe(&mut out);
            t.rows(&mut out);
        }
        Err(msg) => pgwire::encode::error_response(&mut out, "ERROR", "22023", &msg),
    }
    pgwire::encode::ready_for_query(&mut out, status);
    Some((len, out))
}

/// What `SHOW SERVER ROLE` says: the client's choice, or the database's default.
fn role_name(role: Option<RoleChoice>, settings: &RouteSettings) -> &'static str {
    match role {
        Some(RoleChoice::Primary) => "primary",
        Some(RoleChoice::Replica) => "replica",
        Some(RoleChoice::Auto) => "auto",
        Some(RoleChoice::Any) => "any",
        Some(RoleChoice::Default) | None => match settings.default_role {
            DefaultRole::Primary => "primary",
            DefaultRole::Replica => "replica",
            DefaultRole::Any if settings.query_parser_enabled => "auto",
            DefaultRole::Any => "any",
        },
    }
}

/// Classifies the statements of the client's first batch (up to its Sync, or its Query):
/// a read only when every statement in it is one. Incomplete or unknown → a write.
fn classify_batch(client: &ClientConn, cache: &classify::Cache, settings: &RouteSettings) -> Class {
    let (fns, key) = (&settings.writing_functions, settings.writing_key);
    let buf = &client.buf[..];
    let mut pos = 0;
    let mut class = Class::Read;
    let mut seen_parse_unnamed = false;
    let mut any = false;
    while let Ok(Some(h)) = Header::parse(&buf[pos..], client.max_len) {
        if buf.len() - pos < h.total_len() {
            break;
        }
        let body = &buf[pos + pgwire::header::HEADER_LEN..pos + h.total_len()];
        pos += h.total_len();
        let this = match h.tag {
            b'Q' => query_text(body).map(|t| match executed(client, t) {
                // SQL EXECUTE: what the statement it runs does, and its arguments.
                Some((stmt, args)) => {
                    let args = args.map_or(Class::Read, |a| cache.classify(&a, fns, key));
                    stricter(cache.classify(stmt, fns, key), args)
                }
                None => cache.classify(t, fns, key),
            }),
            b'P' => {
                seen_parse_unnamed |= body.first() == Some(&0);
                parse_text(body).map(|t| cache.classify(t, fns, key))
            }
            b'B' => {
                bound_text(client, body, seen_parse_unnamed).map(|t| cache.classify(t, fns, key))
            }
            b'D' | b'E' | b'C' | b'H' => Some(Class::Read),
            b'S' => {
                any = true;
                break;
            }
            _ => None,
        };
        any = true;
        match this {
            Some(Class::Write) | None => return Class::Write,
            Some(Class::ReadOnlyBegin) => class = Class::ReadOnlyBegin,
            Some(Class::Read) => {}
        }
        if h.tag == b'Q' {
            break;
        }
    }
    if any {
        class
    } else {
        Class::Write
    }
}

/// For an SQL `EXECUTE` of one of the client's statements: that statement's text, and its
/// arguments as a `SELECT` of them (`EXECUTE s(nextval('q'))` writes), if any.
fn executed<'a>(client: &'a ClientConn, sql: &str) -> Option<(&'a str, Option<String>)> {
    let first = sql.trim_start().get(..7)?;
    if !first.eq_ignore_ascii_case("execute") {
        return None;
    }
    let sql::Command::Execute { name, rest } = sql::parse(sql)? else {
        return None;
    };
    let stmt = client
        .statements
        .sql(&name)
        .or_else(|| client.statements.named(name.as_bytes()))?;
    let text = match &stmt.source {
        prepared::Source::Parse(b) => query_text(b)?,
        prepared::Source::Sql(s) => sql::prepared_query(s)?,
    };
    let args = rest
        .strip_prefix('(')
        .and_then(|a| a.strip_suffix(')'))
        .map(|a| format!("SELECT {a}"));
    Some((text, args))
}

/// The stricter of two classes: a write if either is, else a read-only BEGIN if either is.
fn stricter(a: Class, b: Class) -> Class {
    match (a, b) {
        (Class::Write, _) | (_, Class::Write) => Class::Write,
        (Class::ReadOnlyBegin, _) | (_, Class::ReadOnlyBegin) => Class::ReadOnlyBegin,
        _ => Class::Read,
    }
}

/// The text of the statement a Bind names: the client's named statement, or its unnamed one
/// when no Parse of this batch replaced it (`None` when already classified in the batch).
fn bound_text<'a>(client: &'a ClientConn, body: &[u8], parsed_unnamed: bool) -> Option<&'a str> {
    let portal_end = body.iter().position(|&b| b == 0)?;
    let rest = &body[portal_end + 1..];
    let name_end = rest.iter().position(|&b| b == 0)?;
    let name = &rest[..name_end];
    if name.is_empty() {
        if parsed_unnamed {
            return Some("");
        }
        return client.statements.unnamed().and_then(query_text);
    }
    match &client.statements.named(name)?.source {
        prepared::Source::Parse(b) => query_text(b),
        prepared::Source::Sql(_) => None,
    }
}
