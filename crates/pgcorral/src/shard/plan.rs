//! Where a statement's rows live, read with PostgreSQL's own parser: the sharding keys it
//! names (`WHERE key = …`, `key IN (…)`, `INSERT … VALUES`), as a [`Plan`] that refers to its
//! constants by position and to its parameters by number, so that one parse serves every text
//! of the same shape and every Bind of a prepared statement.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use pg_query::protobuf::{a_const, AExprKind, BoolExprType, RangeVar, SelectStmt};
use pg_query::{Node, NodeEnum};
use smallvec::SmallVec;

use super::key::Value;
use super::number::{Meets, Typed};
use super::read::{cast_type, constant, literal, parameter, Param};
use super::Sharding;
use crate::skeleton;

/// Where one key column's value comes from.
#[derive(Debug, Clone, PartialEq)]
enum Src {
    /// The `index`-th constant of the text ([`skeleton::constants`]), negated when written
    /// after a unary minus.
    Literal {
        index: usize,
        negate: bool,
    },
    /// Parameter `$n` (0-based here).
    Param(usize),
    /// A constant's text read from the parse tree (texts whose constants the scan cannot
    /// number), and whether it is a string (else a number).
    Text(String, bool),
    Null,
}

/// The types a value is cast to, innermost first (`'7.5'::numeric::int4`).
type Casts = SmallVec<[Typed; 1]>;

/// A `column = value` or `column IN (values)` term: the column's name and its values.
type Term<'n> = (&'n [Node], Vec<(Src, Casts)>);

/// One full key of a sharded table (the table's index in [`Sharding::tables`]).
#[derive(Debug, Clone, PartialEq)]
struct KeyUse {
    table: usize,
    sources: Vec<(Src, Casts)>,
    /// The values are stored in the key (INSERT), not compared with it (WHERE).
    assign: bool,
}

/// What a request's statements say about their shard, before their constants and parameters
/// are read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Every full key named; all must land on one shard.
    keys: Vec<KeyUse>,
    /// A sharded table named without a full key (its name and key columns, for the message).
    unkeyed: Option<String>,
    /// A table neither sharded nor omnisharded.
    unsharded: Option<String>,
    /// An omnisharded table.
    omni: Option<String>,
    /// A statement that needs the default shard for another reason.
    elsewhere: Option<&'static str>,
    /// An UPDATE that assigns a sharding key of this table (its index; the row may move to
    /// another shard), and its name and column for messages.
    moves_key: Option<(usize, String)>,
    /// Refused for this reason.
    refused: Option<String>,
    /// An INSERT without a column list into this sharded table, whose columns are not known.
    needs_columns: Option<usize>,
    /// `COPY ... FROM STDIN` into this sharded table: its rows are split to their shards.
    copy_in: Option<usize>,
    /// The keys are the rows of the request's one statement, an `INSERT ... VALUES`, in order:
    /// rows on several shards can be split into an INSERT per shard.
    insert_rows: bool,
}

/// Where a request goes, once its values are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Every key names this shard.
    Shard(usize),
    /// No key, and nothing that needs one: any shard answers alike (PostgreSQL's own error for a
    /// bad key value included).
    Any,
    /// Only omnisharded tables: any shard for a read; a write is refused until writes span
    /// shards.
    Omni(String),
    /// The columns of sharded table `n` (its index) must be read from the catalog first (an
    /// INSERT without a column list).
    NeedColumns(usize),
    /// `COPY ... FROM STDIN` into sharded table `n`: split row by row.
    CopyIn(usize),
    /// An `INSERT ... VALUES` whose rows are on several shards: each row's shard, in order.
    SplitInsert(Vec<usize>),
    /// The database's default shard, if it has one; else refused for this reason.
    Default(String),
    /// Keys on these shards (sorted), and the refusal of a request that is not a read.
    Several(Vec<usize>, String),
    /// An UPDATE that assigns sharded table `n`'s key: the shards that may hold the rows it
    /// changes (empty: every shard), and the refusal where rows cannot be moved.
    MovesKey(usize, Vec<usize>, String),
    /// Refused: a key moved, or another reason.
    Refuse(String),
}

impl Plan {
    /// Adds `other`'s findings (another statement of the same request).
    pub fn merge(&mut self, other: &Plan) {
        self.keys.extend(other.keys.iter().cloned());
        self.unkeyed = self.unkeyed.take().or_else(|| other.unkeyed.clone());
        self.unsharded = self.unsharded.take().or_else(|| other.unsharded.clone());
        self.omni = self.omni.take().or_else(|| other.omni.clone());
        self.elsewhere = self.elsewhere.or(other.elsewhere);
        self.moves_key = self.moves_key.take().or_else(|| other.moves_key.clone());
        self.refused = self.refused.take().or_else(|| other.refused.clone());
        self.needs_columns = self.needs_columns.or(other.needs_columns);
        self.copy_in = self.copy_in.or(other.copy_in);
    }

    /// Needs the values of `$n` parameters.
    pub fn has_params(&self) -> bool {
        self.keys
            .iter()
            .any(|k| k.sources.iter().any(|s| matches!(s.0, Src::Param(_))))
    }

    /// The place of a request with this plan: `text` is the statement's text (for its
    /// constants), `param(i)` parameter `$i+1` as the client sent it.
    pub fn place<'p>(
        &self,
        sharding: &Sharding,
        text: &str,
        param: &dyn Fn(usize) -> Option<Param<'p>>,
    ) -> Place {
        self.place_in(sharding, text, None, param)
    }

    /// [`Plan::place`], with the spans of `text`'s constants when the caller has them
    /// ([`Plans::near`] notes them while it hashes the text).
    pub fn place_in<'p>(
        &self,
        sharding: &Sharding,
        text: &str,
        known: Option<&[(usize, usize)]>,
        param: &dyn Fn(usize) -> Option<Param<'p>>,
    ) -> Place {
        if let Some(why) = &self.refused {
            return Place::Refuse(why.clone());
        }
        if let Some(t) = self.needs_columns {
            return Place::NeedColumns(t);
        }
        if let Some(t) = self.copy_in {
            return Place::CopyIn(t);
        }
        if let Some((table, m)) = &self.moves_key {
            let why = format!(
                "UPDATE assigns the sharding key of {m}: a row that moves to another shard is moved for a simple query of one statement outside a transaction only, for now; delete it and insert it again"
            );
            return match self.keyed(sharding, text, known, param) {
                Place::Shard(n) => Place::MovesKey(*table, vec![n], why),
                Place::Several(shards, _) => Place::MovesKey(*table, shards, why),
                p @ (Place::Refuse(_) | Place::NeedColumns(_)) => p,
                // No key: every shard may hold rows it changes.
                _ => Place::MovesKey(*table, Vec::new(), why),
            };
        }
        self.keyed(sharding, text, known, param)
    }

    /// [`Plan::place_in`] by the keys the statements name.
    fn keyed<'p>(
        &self,
        sharding: &Sharding,
        text: &str,
        known: Option<&[(usize, usize)]>,
        param: &dyn Fn(usize) -> Option<Param<'p>>,
    ) -> Place {
        let mut spans: Option<SmallVec<[(usize, usize); 8]>> = None;
        // The shards named (most requests name one: no allocation then), and each row's for an
        // INSERT.
        let mut first: Option<usize> = None;
        let mut shards: Vec<usize> = Vec::new();
        let mut row_shards: Vec<usize> = Vec::new();
        let mut values: SmallVec<[Value; 2]> = SmallVec::new();
        for k in &self.keys {
            let table = &sharding.tables[k.table];
            values.clear();
            for ((src, casts), &ty) in k.sources.iter().zip(&table.types) {
                let v = match src {
                    Src::Null => Meets::Key(Value::Null),
                    Src::Text(t, quoted) => constant(t, *quoted, casts, ty, k.assign),
                    Src::Param(i) => match param(*i).and_then(|p| parameter(p, casts, ty, k.assign)) {
                        Some(v) => v,
                        // Not read, not a guess: the request goes where no key sends it.
                        None => {
                            return Place::Default(format!(
                                "the sharding key in parameter ${} cannot be read as {}: name the shard (SET SHARD, /* shard_id: n */)",
                                i + 1,
                                ty.name()
                            ))
                        }
                    },
                    Src::Literal { index, negate } => {
                        let spans = match known {
                            Some(k) => k,
                            None => spans.get_or_insert_with(|| {
                                let mut v = SmallVec::new();
                                skeleton::constants(text, |a, b| v.push((a, b)));
                                v
                            }),
                        };
                        match spans.get(*index) {
                            Some(&(a, b)) => literal(&text[a..b], *negate, casts, ty, k.assign),
                            None => Meets::Nothing,
                        }
                    }
                };
                match v {
                    Meets::Key(v) => values.push(v),
                    // A constant that is not a value of the key's type: PostgreSQL refuses
                    // it, or it matches nothing, on any shard alike.
                    Meets::Nothing => return Place::Any,
                    Meets::Several => return Place::Default(format!(
                        "the sharding key of {} is compared as a float8, which several keys (on several shards) may equal: compare it with an integer, or name the shard (SET SHARD, /* shard_id: n */)",
                        table.name
                    )),
                }
            }
            let shard = sharding.shard_of(&table.types, &values);
            match first {
                None => first = Some(shard),
                Some(f) if f != shard && shards.is_empty() => shards.extend([f, shard]),
                Some(_) if !shards.is_empty() && !shards.contains(&shard) => shards.push(shard),
                Some(_) => {}
            }
            if self.insert_rows {
                row_shards.push(shard);
            }
        }
        if shards.len() > 1 && self.insert_rows {
            return Place::SplitInsert(row_shards);
        }
        if shards.len() > 1 {
            shards.sort_unstable();
            let shown = format!("{shards:?}");
            return Place::Several(shards, format!(
                "the request's sharding keys are on shards {shown}: a request goes to one shard (split it by key, or name the shard)"
            ));
        }
        if let Some(s) = first {
            return Place::Shard(s);
        }
        if let Some(t) = &self.unkeyed {
            return Place::Default(format!(
                "the query names sharded table {t} without its sharding key: give the key in WHERE (key = value), SET SHARDING KEY, SET SHARD or a /* sharding_key: v */ comment"
            ));
        }
        if let Some(t) = &self.unsharded {
            return Place::Default(format!(
                "table {t} is neither sharded nor omnisharded in pgcorral's configuration: name the shard (SET SHARD, /* shard_id: n */)"
            ));
        }
        if let Some(why) = self.elsewhere {
            return Place::Default(why.to_string());
        }
        match &self.omni {
            Some(t) => Place::Omni(t.clone()),
            None => Place::Any,
        }
    }
}

/// Plans remembered by the shape of their text (constants left out), for one sharding
/// configuration.
pub struct Plans {
    map: Mutex<HashMap<u64, Arc<Plan>>>,
    /// This cache among every `Plans` of the process, and how many times its plans were
    /// forgotten: a client's [`NearPlan`] is good while both are the same.
    id: u64,
    generation: AtomicU64,
    /// Keyed per process (the key of a text chosen by a client cannot be predicted).
    hasher: foldhash::quality::RandomState,
    /// Each sharded table's columns in order (by its index), once read from a shard's catalog.
    columns: Mutex<HashMap<usize, Arc<[String]>>>,
    /// Turns of the shards answering requests that any shard can answer.
    turn: AtomicUsize,
}

impl Default for Plans {
    fn default() -> Plans {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Plans {
            map: Default::default(),
            id: IDS.fetch_add(1, Relaxed),
            generation: AtomicU64::new(0),
            hasher: Default::default(),
            columns: Default::default(),
            turn: AtomicUsize::new(0),
        }
    }
}

/// The spans (start, end) of a text's constants, in order.
pub type Spans = SmallVec<[(usize, usize); 8]>;

/// Whether a string constant among `spans` holds a backslash: an escape in an `E''` string,
/// or in any string when standard_conforming_strings is off; such a text is planned whole
/// (its strings' values read by the parser as the client's settings make it read them),
/// not by its shape.
fn escaped(sql: &str, spans: &[(usize, usize)]) -> bool {
    let b = sql.as_bytes();
    spans
        .iter()
        .any(|&(from, to)| b[from] == b'\'' && memchr::memchr(b'\\', &b[from..to]).is_some())
}

/// The plan a client used last, kept by the client: its next request of the same shape finds
/// it without the shared map's lock or a reference count other threads touch.
#[derive(Debug, Clone)]
pub struct NearPlan {
    plans: (u64, u64),
    key: u64,
    plan: Arc<Plan>,
    /// The text the plan was found for and its constants: a next text of the same shape is
    /// told by comparing the text around its constants ([`skeleton::same_shape`]), without
    /// scanning it. Boxed: kept in every client's route state; `None` for a long text.
    shape: Option<Box<(String, Spans)>>,
}

/// The longest query text kept as a client's [`NearPlan::shape`].
const SHAPE_CAP: usize = 4096;

/// Keeps `sql` and its constants as a client's last shape, in the buffers it had (no
/// allocation once they are big enough); none for a text longer than [`SHAPE_CAP`].
fn remember(shape: &mut Option<Box<(String, Spans)>>, sql: &str, spans: &Spans) {
    if sql.len() > SHAPE_CAP {
        *shape = None;
        return;
    }
    let s = shape.get_or_insert_with(Default::default);
    s.0.clear();
    s.0.push_str(sql);
    s.1.clone_from(spans);
}

impl std::fmt::Debug for Plans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Plans")
    }
}

impl PartialEq for Plans {
    /// A cache: two configurations are equal whatever they remember.
    fn eq(&self, _: &Plans) -> bool {
        true
    }
}

impl Eq for Plans {}

/// Most plans kept per database (then forgotten all at once).
const PLANS_CAP: usize = 4096;

impl Plans {
    /// The columns of sharded table `table` in order, when known.
    pub fn columns(&self, table: usize) -> Option<Arc<[String]>> {
        self.columns.lock().get(&table).cloned()
    }

    /// Notes sharded table `table`'s columns; plans made without them are forgotten.
    pub fn learn_columns(&self, table: usize, columns: Vec<String>) {
        self.columns.lock().insert(table, columns.into());
        self.map.lock().clear();
        self.generation.fetch_add(1, Relaxed);
    }

    /// The next of `shards` to answer a request that any shard can answer.
    pub fn any_shard(&self, shards: usize) -> usize {
        self.turn.fetch_add(1, Relaxed) % shards
    }

    /// The plan of `sql` (one or more statements) under `sharding`.
    pub fn get(&self, sharding: &Sharding, sql: &str) -> Arc<Plan> {
        let mut h = self.hasher.build_hasher();
        let mut spans = Spans::new();
        if !skeleton::hash_noting(sql, &mut h, |a, b| spans.push((a, b))) || escaped(sql, &spans) {
            // Its constants cannot be numbered: planned from its parse tree every time.
            return Arc::new(plan(sharding, sql, false));
        }
        self.shared(sharding, sql, h.finish())
    }

    /// The plan of `sql`, from the client's `near` plan when it is of the same shape (else
    /// from the shared map, and kept as the client's near plan). `spans` gets the spans of
    /// `sql`'s constants, for [`Plan::place_in`] (empty when the plan does not refer to them).
    /// `escapes`: the client's standard_conforming_strings is off (only a text with a
    /// backslash reads otherwise, and such a text is planned whole, never by its shape).
    pub fn near<'n>(
        &self,
        near: &'n mut Option<NearPlan>,
        sharding: &Sharding,
        sql: &str,
        escapes: bool,
        spans: &mut Spans,
    ) -> std::borrow::Cow<'n, Plan> {
        spans.clear();
        let plans = (self.id, self.generation.load(Relaxed));
        if let Some(n) = near.as_ref().filter(|n| n.plans == plans) {
            if let Some(shape) = &n.shape {
                if skeleton::same_shape(&shape.0, &shape.1, sql, |a, b| spans.push((a, b))) {
                    if escaped(sql, spans) {
                        spans.clear();
                        return std::borrow::Cow::Owned(plan_with(sharding, sql, false, escapes));
                    }
                    return std::borrow::Cow::Borrowed(&near.as_ref().expect("checked").plan);
                }
                spans.clear();
            }
        }
        let mut h = self.hasher.build_hasher();
        if !skeleton::hash_noting(sql, &mut h, |a, b| spans.push((a, b))) || escaped(sql, spans) {
            spans.clear();
            return std::borrow::Cow::Owned(plan_with(sharding, sql, false, escapes));
        }
        let key = h.finish();
        if !near
            .as_ref()
            .is_some_and(|n| n.key == key && n.plans == plans)
        {
            let plan = self.shared(sharding, sql, key);
            // The last shape's buffers are reused for this one.
            let shape = near.take().and_then(|n| n.shape);
            *near = Some(NearPlan {
                plans,
                key,
                plan,
                shape,
            });
        }
        let n = near.as_mut().expect("just set");
        remember(&mut n.shape, sql, spans);
        std::borrow::Cow::Borrowed(&n.plan)
    }

    fn shared(&self, sharding: &Sharding, sql: &str, key: u64) -> Arc<Plan> {
        if let Some(p) = self.map.lock().get(&key) {
            return p.clone();
        }
        let p = Arc::new(plan(sharding, sql, true));
        let mut map = self.map.lock();
        if map.len() >= PLANS_CAP {
            map.clear();
        }
        map.insert(key, p.clone());
        p
    }
}

/// Reads `sql`'s statements. `numbered`: constants are referred to by their place in the
/// text (the scan numbers them), else by value.
pub fn plan(sharding: &Sharding, sql: &str, numbered: bool) -> Plan {
    plan_with(sharding, sql, numbered, false)
}

/// How PostgreSQL's parser reads a client's text: `escapes` when its
/// standard_conforming_strings is off.
pub fn parser_options(escapes: bool) -> pg_query::ParserOptions {
    if escapes {
        pg_query::ParserOptions::DISABLE_STANDARD_CONFORMING_STRINGS
    } else {
        pg_query::ParserOptions::DEFAULT
    }
}

/// [`plan`] of a client whose standard_conforming_strings is off (`escapes`).
fn plan_with(sharding: &Sharding, sql: &str, numbered: bool, escapes: bool) -> Plan {
    let Ok(parsed) = pg_query::parse(sql, parser_options(escapes)) else {
        // PostgreSQL refuses it too, wherever it goes.
        return Plan::default();
    };
    // Constants are numbered only where the scan can tell every one of them apart, and read
    // alike whatever the escapes.
    let mut spans = Spans::new();
    let numbered = numbered && skeleton::constants(sql, |a, b| spans.push((a, b)));
    let numbered = numbered && !escaped(sql, &spans);
    let starts: Vec<usize> = spans.iter().map(|s| s.0).collect();
    let mut reader = Reader {
        sharding,
        sql,
        escapes,
        starts: numbered.then_some(starts),
        plan: Plan::default(),
        keyed: Vec::new(),
    };
    for raw in &parsed.protobuf.stmts {
        reader.statement(raw.stmt.as_deref());
    }
    if parsed.protobuf.stmts.len() > 1 {
        reader.plan.insert_rows = false;
    }
    if reader.plan.copy_in.is_some() && parsed.protobuf.stmts.len() > 1 {
        reader.plan.copy_in = None;
        reader.plan.refused = Some(
            "COPY FROM STDIN into a sharded table is split to the shards only when it is the only statement of its Query".into(),
        );
    }
    // Every table the statements name, wherever (subqueries, CTEs, joins), sorted so the
    // reason given names the same table every time (libpg_query lists them in a hash set's
    // order).
    let mut names = parsed.tables();
    names.sort_unstable();
    for name in &names {
        let (schema, rel) = match name.split_once('.') {
            Some((s, r)) => (Some(s), r),
            None => (None, name.as_str()),
        };
        if let Some(i) = sharding.tables.iter().position(|t| t.is(schema, rel)) {
            if let Some(why) = &sharding.tables[i].refused {
                reader.plan.refused.get_or_insert_with(|| why.clone());
            }
            if !reader.keyed.contains(&i) {
                let t = &sharding.tables[i];
                reader.plan.unkeyed.get_or_insert_with(|| {
                    format!("\"{}\" (key: {})", t.name, t.columns.join(", "))
                });
            }
        } else if sharding.is_omnisharded(schema, rel) {
            reader
                .plan
                .omni
                .get_or_insert_with(|| format!("\"{name}\""));
        } else {
            reader
                .plan
                .unsharded
                .get_or_insert_with(|| format!("\"{name}\""));
        }
    }
    reader.plan
}

struct Reader<'a> {
    sharding: &'a Sharding,
    sql: &'a str,
    /// Backslashes in plain strings are escapes (standard_conforming_strings off).
    escapes: bool,
    /// Where each numbered constant starts, when constants are numbered.
    starts: Option<Vec<usize>>,
    plan: Plan,
    /// Tables (indexes) a key was found for.
    keyed: Vec<usize>,
}

/// A table of the FROM list: its index among the sharded tables and the name it is seen by.
struct Visible {
    table: usize,
    name: String,
}

impl Reader<'_> {
    fn statement(&mut self, stmt: Option<&Node>) {
        match stmt.and_then(|n| n.node.as_ref()) {
            Some(NodeEnum::SelectStmt(s)) => self.select(s),
            Some(NodeEnum::UpdateStmt(u)) => {
                let mut from = self.visible(u.relation.as_ref());
                self.tables_in(&u.from_clause, &mut from);
                if let Some(rel) = u.relation.as_ref() {
                    if let Some(v) = from.first().filter(|v| v.name == visible_name(rel)) {
                        let t = &self.sharding.tables[v.table];
                        for target in &u.target_list {
                            if let Some(NodeEnum::ResTarget(r)) = target.node.as_ref() {
                                if t.columns.contains(&r.name) {
                                    self.plan.moves_key =
                                        Some((v.table, format!("\"{}\" ({})", t.name, r.name)));
                                }
                            }
                        }
                    }
                }
                self.keys_from(u.where_clause.as_deref(), &from);
            }
            Some(NodeEnum::DeleteStmt(d)) => {
                let mut from = self.visible(d.relation.as_ref());
                self.tables_in(&d.using_clause, &mut from);
                self.keys_from(d.where_clause.as_deref(), &from);
            }
            Some(NodeEnum::InsertStmt(i)) => self.insert(i),
            Some(NodeEnum::CopyStmt(c)) if c.is_from && !c.is_program && c.filename.is_empty() => {
                if let Some(v) = c.relation.as_ref().and_then(|r| self.sharded(r)) {
                    self.plan.copy_in = Some(v.table);
                    self.keyed.push(v.table);
                }
            }
            Some(NodeEnum::ExplainStmt(e)) => self.statement(e.query.as_deref()),
            // Settings, transaction control and the like run anywhere; what they change
            // follows the client to every shard.
            Some(
                NodeEnum::VariableSetStmt(_)
                | NodeEnum::VariableShowStmt(_)
                | NodeEnum::TransactionStmt(_)
                | NodeEnum::DiscardStmt(_)
                | NodeEnum::DeallocateStmt(_)
                | NodeEnum::PrepareStmt(_)
                | NodeEnum::ListenStmt(_)
                | NodeEnum::UnlistenStmt(_),
            ) => {}
            Some(NodeEnum::ExecuteStmt(_)) => {
                self.plan.elsewhere.get_or_insert(
                    "an SQL EXECUTE is routed by SET SHARD, SET SHARDING KEY or a comment, not by its arguments",
                );
            }
            // Anything else that names a table is placed by that table (below); one that
            // names none (a function call, DO, CREATE FUNCTION, ...) cannot be placed.
            Some(_) => {
                self.plan.elsewhere.get_or_insert(
                    "the statement names no sharded table: name the shard (SET SHARD, /* shard_id: n */)",
                );
            }
            None => {}
        }
    }

    fn select(&mut self, s: &SelectStmt) {
        if let (Some(l), Some(r)) = (s.larg.as_deref(), s.rarg.as_deref()) {
            self.select(l);
            self.select(r);
            return;
        }
        let mut from = Vec::new();
        self.tables_in(&s.from_clause, &mut from);
        self.keys_from(s.where_clause.as_deref(), &from);
    }

    /// The sharded table `rel` names, if it is one, as a one-entry list.
    fn visible(&self, rel: Option<&RangeVar>) -> Vec<Visible> {
        rel.and_then(|r| self.sharded(r)).into_iter().collect()
    }

    fn sharded(&self, r: &RangeVar) -> Option<Visible> {
        let schema = super::scatter::schema(r);
        let table = self
            .sharding
            .tables
            .iter()
            .position(|t| t.is(schema, &r.relname))?;
        Some(Visible {
            table,
            name: visible_name(r),
        })
    }

    /// The sharded tables of a FROM list (joins included); join conditions count as WHERE.
    fn tables_in(&mut self, items: &[Node], out: &mut Vec<Visible>) {
        let mut quals = Vec::new();
        for item in items {
            self.table_in(item, out, &mut quals);
        }
        for q in quals {
            let from = std::mem::take(out);
            self.keys_from(Some(q), &from);
            *out = from;
        }
    }

    fn table_in<'n>(&self, item: &'n Node, out: &mut Vec<Visible>, quals: &mut Vec<&'n Node>) {
        match item.node.as_ref() {
            Some(NodeEnum::RangeVar(r)) => out.extend(self.sharded(r)),
            Some(NodeEnum::JoinExpr(j)) => {
                for side in [j.larg.as_deref(), j.rarg.as_deref()].into_iter().flatten() {
                    self.table_in(side, out, quals);
                }
                if let Some(q) = j.quals.as_deref() {
                    quals.push(q);
                }
            }
            _ => {}
        }
    }

    /// Keys of `from`'s tables in `where_`: `col = v` terms of its top-level AND, and
    /// `col IN (v, ...)` for one-column keys.
    fn keys_from(&mut self, where_: Option<&Node>, from: &[Visible]) {
        if from.is_empty() {
            return;
        }
        let mut terms: Vec<Term> = Vec::new();
        if let Some(w) = where_ {
            self.terms(w, &mut terms);
        }
        for v in from {
            let t = &self.sharding.tables[v.table];
            let names_col = |fields: &[Node], col: &str| -> bool {
                let names: Vec<&str> = fields
                    .iter()
                    .filter_map(|f| match f.node.as_ref() {
                        Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
                        _ => None,
                    })
                    .collect();
                match names[..] {
                    [c] => c == col && from.len() == 1,
                    [q, c] => c == col && q == v.name,
                    [_, q, c] => c == col && q == v.name,
                    _ => false,
                }
            };
            // Each key column's candidate values.
            let per_col: Vec<Option<&Vec<(Src, Casts)>>> = t
                .columns
                .iter()
                .map(|c| {
                    terms
                        .iter()
                        .find(|(f, _)| names_col(f, c))
                        .map(|(_, vals)| vals)
                })
                .collect();
            if per_col.iter().any(Option::is_none) {
                continue;
            }
            let per_col: Vec<&Vec<(Src, Casts)>> = per_col.into_iter().flatten().collect();
            if per_col.len() == 1 {
                for src in per_col[0] {
                    self.plan.keys.push(KeyUse {
                        table: v.table,
                        sources: vec![src.clone()],
                        assign: false,
                    });
                }
            } else if per_col.iter().all(|vals| vals.len() == 1) {
                self.plan.keys.push(KeyUse {
                    table: v.table,
                    sources: per_col.iter().map(|vals| vals[0].clone()).collect(),
                    assign: false,
                });
            } else {
                continue;
            }
            self.keyed.push(v.table);
        }
    }

    /// `column = value` and `column IN (values)` terms of a conjunction.
    fn terms<'n>(&self, node: &'n Node, out: &mut Vec<Term<'n>>) {
        match node.node.as_ref() {
            Some(NodeEnum::BoolExpr(b)) if b.boolop() == BoolExprType::AndExpr => {
                for a in &b.args {
                    self.terms(a, out);
                }
            }
            Some(NodeEnum::AExpr(e)) => {
                let is_eq = e.name.len() == 1
                    && matches!(e.name[0].node.as_ref(), Some(NodeEnum::String(s)) if s.sval == "=");
                let (Some(l), Some(r)) = (e.lexpr.as_deref(), e.rexpr.as_deref()) else {
                    return;
                };
                match e.kind() {
                    AExprKind::AexprOp if is_eq => {
                        for (col, val) in [(l, r), (r, l)] {
                            if let (Some(fields), Some(src)) = (column(col), self.source(val)) {
                                out.push((fields, vec![src]));
                                break;
                            }
                        }
                    }
                    AExprKind::AexprIn if is_eq => {
                        let (Some(fields), Some(NodeEnum::List(list))) =
                            (column(l), r.node.as_ref())
                        else {
                            return;
                        };
                        let vals: Option<Vec<(Src, Casts)>> =
                            list.items.iter().map(|i| self.source(i)).collect();
                        if let Some(vals) = vals.filter(|v| !v.is_empty()) {
                            out.push((fields, vals));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn insert(&mut self, i: &pg_query::protobuf::InsertStmt) {
        let Some(v) = i.relation.as_ref().and_then(|r| self.sharded(r)) else {
            return;
        };
        let t = &self.sharding.tables[v.table];
        let known;
        let cols: Vec<&str> = if i.cols.is_empty() {
            // No column list: the table's own order, as the catalog says.
            match self.sharding.plans.columns(v.table) {
                Some(c) => {
                    known = c;
                    known.iter().map(String::as_str).collect()
                }
                None => {
                    self.plan.needs_columns = Some(v.table);
                    return;
                }
            }
        } else {
            i.cols
                .iter()
                .filter_map(|c| match c.node.as_ref() {
                    Some(NodeEnum::ResTarget(r)) => Some(r.name.as_str()),
                    _ => None,
                })
                .collect()
        };
        // The position of each key column in the VALUES rows (the column list must name it).
        let Some(at): Option<Vec<usize>> = t
            .columns
            .iter()
            .map(|c| cols.iter().position(|n| n == c))
            .collect()
        else {
            return;
        };
        let Some(NodeEnum::SelectStmt(s)) = i.select_stmt.as_deref().and_then(|n| n.node.as_ref())
        else {
            return;
        };
        if s.values_lists.is_empty() {
            // INSERT ... SELECT: its rows are not known here.
            return;
        }
        let mut keys = Vec::new();
        for row in &s.values_lists {
            let Some(NodeEnum::List(items)) = row.node.as_ref() else {
                return;
            };
            let sources: Option<Vec<(Src, Casts)>> = at
                .iter()
                .map(|&p| items.items.get(p).and_then(|n| self.source(n)))
                .collect();
            let Some(sources) = sources else {
                return;
            };
            keys.push(KeyUse {
                table: v.table,
                sources,
                assign: true,
            });
        }
        self.plan.insert_rows = self.plan.keys.is_empty();
        self.plan.keys.extend(keys);
        self.keyed.push(v.table);
    }

    /// A value whose key hash can be computed: a constant, a parameter, NULL, or one of them
    /// cast.
    fn source(&self, node: &Node) -> Option<(Src, Casts)> {
        if let NodeEnum::TypeCast(c) = node.node.as_ref()? {
            let (src, mut casts) = self.source(c.arg.as_deref()?)?;
            casts.push(cast_type(c.type_name.as_ref()));
            return Some((src, casts));
        }
        self.value(node).map(|src| (src, Casts::new()))
    }

    /// A constant, a parameter or NULL.
    fn value(&self, node: &Node) -> Option<Src> {
        match node.node.as_ref()? {
            NodeEnum::ParamRef(p) if p.number >= 1 => Some(Src::Param(p.number as usize - 1)),
            NodeEnum::AConst(c) if c.isnull => Some(Src::Null),
            NodeEnum::AConst(c) => {
                let loc = usize::try_from(c.location).ok()?;
                // Plain constants only (see `plain_constant`), so that both readings agree.
                let sql = self.sql.as_bytes();
                if !plain_constant(sql, loc, self.escapes) {
                    return None;
                }
                if let Some(starts) = &self.starts {
                    // A negative number is read from the '-' before its digits, an E'' string
                    // from its quote.
                    let (at, negate) = match sql.get(loc) {
                        Some(b'-') => {
                            let rest = &self.sql[loc + 1..];
                            (loc + 1 + (rest.len() - rest.trim_start().len()), true)
                        }
                        Some(b'e' | b'E') => (loc + 1, false),
                        _ => (loc, false),
                    };
                    let index = starts.iter().position(|&s| s == at)?;
                    return Some(Src::Literal { index, negate });
                }
                match c.val.as_ref()? {
                    a_const::Val::Ival(i) => Some(Src::Text(i.ival.to_string(), false)),
                    a_const::Val::Sval(s) => Some(Src::Text(s.sval.clone(), true)),
                    a_const::Val::Fval(f) => Some(Src::Text(f.fval.clone(), false)),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// Whether the constant at `loc` is one the skeleton scan reads whole: a quoted string
/// (`'…'`, or `E'…'`, whose backslashes are escapes, as they are in every string when
/// `escapes`: standard_conforming_strings off) not continued on a later line (`'a'` newline
/// `'b'` is one constant to PostgreSQL), a decimal number, or a minus and one. Not: `U&'…'`,
/// `B'…'`, `X'…'`, `0x1F`, `1_000`. (A text with a backslash is never numbered: its
/// strings' values are read from the parse tree.)
fn plain_constant(sql: &[u8], loc: usize, escapes: bool) -> bool {
    let Some(mut at) = sql.get(loc..) else {
        return false;
    };
    let escapes = match at {
        [b'e' | b'E', b'\'', ..] => {
            at = &at[1..];
            true
        }
        _ => escapes,
    };
    let number = |i: usize| {
        let end = skeleton::number_end(sql, i);
        !sql.get(end)
            .is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80)
    };
    match at.first() {
        Some(b'\'') => {
            let mut i = 1;
            while i < at.len() {
                match at[i] {
                    b'\'' if at.get(i + 1) == Some(&b'\'') => i += 2,
                    b'\\' if escapes => i += 2,
                    b'\'' => break,
                    _ => i += 1,
                }
            }
            // Another quote after only whitespace and comments may continue this string.
            let mut gap = &at[(i + 1).min(at.len())..];
            loop {
                let space = gap.iter().take_while(|b| b.is_ascii_whitespace()).count();
                gap = &gap[space..];
                if gap.starts_with(b"--") {
                    let end = gap.iter().position(|&b| b == b'\n' || b == b'\r');
                    gap = &gap[end.unwrap_or(gap.len())..];
                } else if gap.starts_with(b"/*") {
                    return false;
                } else {
                    break;
                }
                if gap.is_empty() {
                    break;
                }
            }
            gap.first() != Some(&b'\'')
        }
        Some(b'0'..=b'9') => number(loc),
        Some(b'-') => {
            let space = at[1..]
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
            at.get(1 + space).is_some_and(u8::is_ascii_digit) && number(loc + 1 + space)
        }
        _ => false,
    }
}

/// The fields of a column reference.
fn column(node: &Node) -> Option<&[Node]> {
    match node.node.as_ref()? {
        NodeEnum::ColumnRef(c) => Some(&c.fields),
        _ => None,
    }
}

/// The name a FROM item is seen by: its alias, else its name.
fn visible_name(r: &RangeVar) -> String {
    r.alias
        .as_ref()
        .map_or_else(|| r.relname.clone(), |a| a.aliasname.clone())
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
