//! What is outstanding on a server link (ReadyForQuery messages owed, the transaction status,
//! COPY's ignored Syncs, what the client may have changed), as both relay directions track it:
//! plain data below the server connection, prepared statements and the relay.

use pgwire::backend::TxStatus;

/// What is outstanding on a server link; both relay directions update it.
#[derive(Debug, Clone, Copy)]
pub struct LinkState {
    /// ReadyForQuery messages still owed: one per Query, FunctionCall and Sync sent, less the
    /// Syncs PostgreSQL ignores in COPY IN mode.
    pub pending: u32,
    /// Extended-protocol messages were sent after the last Sync.
    pub unsynced: bool,
    /// A Bind was sent after the last Sync.
    pub bound: bool,
    /// Transaction status from the last ReadyForQuery.
    pub tx: TxStatus,
    /// The connection must not be reused (I/O error, FATAL, protocol confusion).
    pub broken: bool,
    /// Syncs that PostgreSQL will ignore because they reach it in COPY IN mode.
    pub copy: CopyTrack,
    /// The client sent something that may have changed session state (see
    /// [`crate::session::scan`]): ask the server before the connection serves anyone else.
    pub dirty: bool,
    /// The client sent something whose effect on the session pgcorral cannot see through
    /// ([`crate::session::scan::Effect::Taint`]): after the capture, the server's settings
    /// count as unknown, so they are reset before it serves anyone (see
    /// [`crate::session::apply::capture`]). Always set with `dirty`.
    pub taint: bool,
    /// The client sent something in this relay that may run user code, which may change the
    /// catalog (see [`crate::session::hooks::Watch::stale`]). Always set with `taint`.
    pub catalog: bool,
    /// One request batch at a time (databases with replicas): a client's next batch is not
    /// sent before the last one is answered, as it may need another server.
    pub one_batch: bool,
    /// Sharded databases: the relay also stops when a batch inside a transaction is answered,
    /// so that the next one is checked against the transaction's shard.
    pub between: bool,
}

/// Extended-protocol clients send Sync (or Flush) right after Execute, before they know the
/// statement is a `COPY ... FROM STDIN`; PostgreSQL ignores the Syncs it reads in copy-in mode,
/// so those earn no ReadyForQuery. This tracks the requests sent since the last Execute so that,
/// when the server answers that Execute with CopyInResponse, the Syncs that followed it directly
/// can be uncounted (see [`LinkState::copy_in_started`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyTrack {
    /// An Execute was sent and no Query/FunctionCall came before the next Sync.
    exec: bool,
    /// Requests (Query, FunctionCall, Sync) counted since that Execute.
    since_exec: u32,
    /// Syncs counted directly after it, with only Flushes between.
    run_syncs: u32,
    /// Nothing but Sync or Flush has followed the Execute yet.
    run_open: bool,
    /// The server is in COPY IN for that Execute: further Syncs of the run are ignored.
    suppress: bool,
    /// A Sync was counted after the run ended (it reaches the server after the COPY).
    synced_after: bool,
}

impl LinkState {
    /// Client sent Execute.
    pub fn on_execute(&mut self) {
        self.copy = CopyTrack {
            exec: true,
            run_open: true,
            ..CopyTrack::default()
        };
    }

    /// Client sent Sync; false when the server will ignore it (not counted).
    pub fn on_sync(&mut self) -> bool {
        let c = &mut self.copy;
        if c.run_open && c.suppress {
            return false;
        }
        c.since_exec = c.since_exec.saturating_add(1);
        if c.run_open {
            c.run_syncs += 1;
        } else {
            c.synced_after = true;
        }
        self.pending += 1;
        self.unsynced = false;
        self.bound = false;
        true
    }

    /// Client sent Query or FunctionCall.
    pub fn on_request(&mut self) {
        let c = &mut self.copy;
        if c.since_exec == 0 {
            // Inside the Execute's batch, before its Sync: no longer the simple pattern.
            c.exec = false;
        }
        c.since_exec = c.since_exec.saturating_add(1);
        c.run_open = false;
        c.suppress = false;
        self.pending += 1;
    }

    /// Client sent any other message; `flush` keeps a Sync run open.
    pub fn on_other(&mut self, flush: bool) {
        if !flush {
            self.copy.run_open = false;
            self.copy.suppress = false;
        }
    }

    /// Server sent CopyInResponse. When it answers the batch of the last Execute (nothing sent
    /// since was answered, nothing before it is outstanding), the Syncs right after that Execute
    /// reached or will reach it in copy-in mode: uncount them, ignore more of them, and keep the
    /// link unsynced until a Sync after the COPY.
    /// Returns how many Syncs were uncounted.
    pub fn copy_in_started(&mut self) -> u32 {
        let c = &mut self.copy;
        if !c.exec || self.pending != c.since_exec {
            return 0;
        }
        let uncounted = c.run_syncs;
        self.pending -= c.run_syncs;
        c.since_exec -= c.run_syncs;
        c.run_syncs = 0;
        c.exec = false;
        c.suppress = c.run_open;
        if !c.synced_after {
            self.unsynced = true;
        }
        uncounted
    }

    /// Nothing in flight and no transaction open: the server may serve another client.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.pending == 0 && !self.unsynced && self.tx == TxStatus::Idle && !self.broken
    }
}

impl Default for LinkState {
    fn default() -> Self {
        LinkState {
            pending: 0,
            unsynced: false,
            bound: false,
            tx: TxStatus::Idle,
            broken: false,
            copy: CopyTrack::default(),
            dirty: false,
            taint: false,
            catalog: false,
            one_batch: false,
            between: false,
        }
    }
}
