//! What a logged-in client is attached to while its requests are answered ([`Link`]), and how
//! servers are acquired for it with its session ([`Attach`]): one pooled server, one server of
//! each of several shards ([`Fanout`], for a request split between shards), or a server of its
//! own ([`dedicated`]).

pub mod copy_in;
pub mod dedicated;
mod fanout;
pub mod gather;
pub mod insert;
mod moves;
pub mod pipeline;
pub mod scatter;
pub mod spanning;
mod statements;
pub mod twophase;

pub use fanout::Fanout;

use crate::cancel::CancelSlot;
use crate::cluster::{Cluster, Shards, Target, Want};
use crate::error::{Error, Result};
use crate::pool::{Checkout, ClientWait};
use crate::session::{self, apply, Settings};

/// What a logged-in pooled client is attached to.
#[derive(Default)]
pub enum Link {
    /// Nothing: between transactions (transaction and statement mode, not pinned).
    #[default]
    Free,
    /// One pooled server: the transaction's, or one kept between transactions (session mode,
    /// or a client pinned by state bound to its server).
    Pooled(Checkout),
    /// One server of each of several shards, each in a transaction of pgcorral's: a request
    /// split between shards. Boxed: rare, and a client's future stays small.
    Shards(Box<Fanout>),
    /// The client's own transaction, spread to several shards: the server its requests now
    /// go to, and the others ([`spanning`]). Boxed, as rare.
    Spanning(Box<spanning::Spanning>),
}

impl Link {
    /// The pooled server it holds (of a transaction across shards: the one its requests now
    /// go to), if that is what it holds.
    #[inline]
    pub fn pooled(&mut self) -> Option<&mut Checkout> {
        match self {
            Link::Pooled(s) => Some(s),
            Link::Spanning(s) => Some(&mut s.current),
            _ => None,
        }
    }

    /// Whether it holds nothing.
    #[inline]
    pub fn is_free(&self) -> bool {
        matches!(self, Link::Free)
    }

    /// The pooled server it holds, taken out (it then holds nothing).
    #[inline]
    pub fn take_pooled(&mut self) -> Option<Checkout> {
        match std::mem::take(self) {
            Link::Pooled(s) => Some(s),
            other => {
                *self = other;
                None
            }
        }
    }

    /// Lets go of what it holds: each server goes back through its checkout guard, which
    /// decides whether it can serve another client.
    #[inline]
    pub fn release(&mut self) {
        *self = Link::Free;
    }
}

/// What a client's servers are acquired with: its cluster, its worker, how long it waits for
/// a busy pool, and the session settings each server it is given must have.
#[derive(Clone, Copy)]
pub struct Attach<'a> {
    pub cluster: &'a Cluster,
    /// Where the client's cancel requests go.
    pub slot: &'a CancelSlot,
    pub worker: usize,
    pub wait: ClientWait,
    pub settings: &'a Settings,
    /// How many prepared statements each server keeps at most (max_prepared_statements; 0:
    /// no limit): a statement bound across shards is prepared once on each shard's server
    /// ([`statements`]).
    pub max_prepared: usize,
}

impl Attach<'_> {
    /// A server (`want`) of `shard`, with the client's settings; `writes`: the request may
    /// write.
    pub async fn checkout(&self, shard: usize, want: Want, writes: bool) -> Result<Checkout> {
        let target = Target {
            shards: Shards::One(shard),
            want,
            writes,
        };
        let mut s = self
            .cluster
            .checkout(target, self.worker, 0, self.wait)
            .await?;
        if !session::matches(&s.applied, self.settings) {
            restore(&mut s, self.settings).await?;
        }
        Ok(s)
    }

    /// A primary of each of `shards`, with the client's settings, each in a transaction.
    pub async fn shards(&self, shards: impl IntoIterator<Item = usize>) -> Result<Fanout> {
        let mut servers = Vec::new();
        let mut list = Vec::new();
        for shard in shards {
            let mut s = self.checkout(shard, Want::Primary, true).await?;
            session::exec::in_transaction(&mut s, "BEGIN").await?;
            servers.push(s);
            list.push(shard);
        }
        Ok(Fanout::new(
            servers,
            list,
            self.cluster.clone(),
            self.worker,
        ))
    }
}

/// Applies the client's settings to a server it was just given; a failure ends the session
/// (its state cannot be restored).
pub async fn restore(server: &mut Checkout, settings: &Settings) -> Result<()> {
    apply::sync(server, settings).await.map_err(|e| {
        Error::new(
            e.kind(),
            format!("could not restore the session's settings on a server connection: {e}"),
        )
    })
}
