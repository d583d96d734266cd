//! The script model: a case is setup SQL plus steps, each one client sending some frontend
//! messages and reading until a given point; built with small Rust builders.

use crate::support::wire::{self, Param};

/// A pgcorral pool mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Session,
    Transaction,
    Statement,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Session, Mode::Transaction, Mode::Statement];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Session => "session",
            Mode::Transaction => "transaction",
            Mode::Statement => "statement",
        }
    }
}

/// Where a step stops reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// After this many ReadyForQuery messages.
    Ready(usize),
    /// After the first message with this tag (e.g. `b'G'` CopyInResponse, `b'E'` an error
    /// answered to a Flush).
    Tag(u8),
}

/// One step: client `client` sends `send` in one write and reads until `until`.
#[derive(Clone, Debug)]
pub struct Step {
    pub client: usize,
    pub send: Vec<u8>,
    pub until: Until,
    /// What was sent, for people ("Q select 1", "P s1 'insert ...' B E S").
    pub label: String,
}

/// A named script.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub clients: usize,
    /// Run as superuser on a fresh schema before each side.
    pub setup: Vec<String>,
    pub steps: Vec<Step>,
    /// Pool modes this case is compared in (statement mode refuses transactions by design).
    pub modes: Vec<Mode>,
    /// Server connections in transaction and statement mode (1 unless a client stays pinned
    /// while another one acts); session mode always has one per client.
    pub pool_size: usize,
}

impl Case {
    /// A case compared in every pool mode, with a pool of one server.
    pub fn new(name: &str, clients: usize) -> Case {
        Case {
            name: name.to_string(),
            clients,
            setup: Vec::new(),
            steps: Vec::new(),
            modes: Mode::ALL.to_vec(),
            pool_size: 1,
        }
    }

    /// Setup SQL (one simple Query, run as superuser before each side).
    pub fn setup(mut self, sql: &str) -> Case {
        self.setup.push(sql.to_string());
        self
    }

    /// Not compared in statement mode: the case uses explicit transactions (which statement
    /// mode refuses by design) or state that pins.
    pub fn no_statement(mut self) -> Case {
        self.modes.retain(|m| *m != Mode::Statement);
        self
    }

    pub fn pool(mut self, size: usize) -> Case {
        self.pool_size = size;
        self
    }

    /// Client `c` sends a simple Query and reads its answer.
    pub fn q(mut self, c: usize, sql: &str) -> Case {
        self.steps.push(Step {
            client: c,
            send: wire::query(sql),
            until: Until::Ready(1),
            label: format!("Q {sql}"),
        });
        self
    }

    /// Client `c` sends an extended-protocol batch and reads to its last Sync's
    /// ReadyForQuery (or to `Batch::until`).
    pub fn ext(mut self, c: usize, b: Batch) -> Case {
        let until = b.until.unwrap_or(Until::Ready(b.syncs));
        assert!(
            until != Until::Ready(0),
            "a batch without Sync needs an explicit until"
        );
        self.steps.push(Step {
            client: c,
            send: b.bytes,
            until,
            label: b.label.join(" "),
        });
        self
    }

    /// Client `c` sends `COPY ... FROM STDIN` (reads to CopyInResponse), then `rows`,
    /// CopyDone and reads to ReadyForQuery.
    pub fn copy_in(mut self, c: usize, sql: &str, rows: &[&str]) -> Case {
        self.steps.push(Step {
            client: c,
            send: wire::query(sql),
            until: Until::Tag(b'G'),
            label: format!("Q {sql}"),
        });
        let mut send = Vec::new();
        for r in rows {
            send.extend(wire::copy_data(r.as_bytes()));
        }
        send.extend(wire::copy_done());
        self.steps.push(Step {
            client: c,
            send,
            until: Until::Ready(1),
            label: format!("d x{} c", rows.len()),
        });
        self
    }

    /// Appends a prepared step.
    pub fn step(mut self, s: Step) -> Case {
        self.steps.push(s);
        self
    }

    /// The script as text, one step a line.
    pub fn listing(&self) -> String {
        let mut out = format!(
            "case {} ({} clients, pool {})\n",
            self.name, self.clients, self.pool_size
        );
        for s in &self.setup {
            out.push_str(&format!("  setup: {s}\n"));
        }
        for (i, s) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "  {i:>3} c{}: {}  [until {:?}]\n",
                s.client, s.label, s.until
            ));
        }
        out
    }
}

/// An extended-protocol batch under construction.
#[derive(Default)]
pub struct Batch {
    bytes: Vec<u8>,
    label: Vec<String>,
    syncs: usize,
    until: Option<Until>,
}

fn short(sql: &str) -> String {
    let s: String = sql.chars().take(60).collect();
    if s.len() < sql.len() {
        format!("{s}…")
    } else {
        s
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn parse(self, name: &str, sql: &str) -> Batch {
        self.parse_typed(name, sql, &[])
    }

    pub fn parse_typed(mut self, name: &str, sql: &str, types: &[u32]) -> Batch {
        self.bytes.extend(wire::parse(name, sql, types));
        self.label.push(format!("P[{name}] {:?}", short(sql)));
        self
    }

    /// Bind of `stmt` to the unnamed portal with text parameters (`None` = NULL).
    pub fn bind(mut self, stmt: &str, params: &[Option<&str>]) -> Batch {
        let p: Vec<Param> = params
            .iter()
            .map(|v| v.map_or(Param::Null, Param::Text))
            .collect();
        self.bytes.extend(wire::bind("", stmt, &p, false));
        self.label.push(format!("B[{stmt}] {params:?}"));
        self
    }

    pub fn describe_stmt(mut self, name: &str) -> Batch {
        self.bytes.extend(wire::describe(b'S', name));
        self.label.push(format!("DS[{name}]"));
        self
    }

    pub fn describe_portal(mut self) -> Batch {
        self.bytes.extend(wire::describe(b'P', ""));
        self.label.push("DP".into());
        self
    }

    /// Execute of the unnamed portal, all rows.
    pub fn execute(self) -> Batch {
        self.execute_rows(0)
    }

    pub fn execute_rows(mut self, max: i32) -> Batch {
        self.bytes.extend(wire::execute("", max));
        self.label.push(if max == 0 {
            "E".into()
        } else {
            format!("E{max}")
        });
        self
    }

    pub fn close_stmt(mut self, name: &str) -> Batch {
        self.bytes.extend(wire::close(b'S', name));
        self.label.push(format!("CS[{name}]"));
        self
    }

    pub fn sync(mut self) -> Batch {
        self.bytes.extend(wire::sync());
        self.label.push("S".into());
        self.syncs += 1;
        self
    }

    pub fn flush(mut self) -> Batch {
        self.bytes.extend(wire::flush());
        self.label.push("H".into());
        self
    }

    /// A simple Query inside the batch.
    pub fn query(mut self, sql: &str) -> Batch {
        self.bytes.extend(wire::query(sql));
        self.label.push(format!("Q {:?}", short(sql)));
        self.syncs += 1;
        self
    }

    /// A message given byte for byte.
    pub fn raw(mut self, tag: u8, body: &[u8], label: &str) -> Batch {
        self.bytes.extend(wire::message(tag, body));
        self.label.push(label.to_string());
        self
    }

    /// Stop reading at the first message with `tag` instead of at the Syncs.
    pub fn until(mut self, tag: u8) -> Batch {
        self.until = Some(Until::Tag(tag));
        self
    }

    /// Parse (unnamed), Bind, Execute, Sync of `sql` with text parameters.
    pub fn run(sql: &str, params: &[Option<&str>]) -> Batch {
        Batch::new()
            .parse("", sql)
            .bind("", params)
            .execute()
            .sync()
    }
}
