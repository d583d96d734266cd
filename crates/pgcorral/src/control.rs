//! What the admin console switches: paused databases (their clients' next transactions wait
//! until RESUME), disabled ones (new logins refused), and SUSPEND (everything paused and no new
//! connections accepted). Checking costs one relaxed load while nothing is paused.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Paused and disabled databases.
#[derive(Default)]
pub struct Control {
    /// Something is paused (the fast path's only check).
    any_paused: AtomicBool,
    paused: Mutex<Paused>,
    resumed: Notify,
    disabled: Mutex<HashSet<String>>,
    /// SUSPEND: no new connections are accepted until RESUME.
    suspended: AtomicBool,
    /// Wakes the accept loop when SUSPEND begins.
    suspending: Notify,
}

#[derive(Default)]
struct Paused {
    all: bool,
    dbs: HashSet<String>,
}

impl Control {
    /// Pauses `db`, or every database.
    pub fn pause(&self, db: Option<&str>) {
        let mut p = self.paused.lock();
        match db {
            None => p.all = true,
            Some(d) => {
                p.dbs.insert(d.to_string());
            }
        }
        self.any_paused.store(true, Relaxed);
    }

    /// Resumes `db`, or everything; false when it was not paused.
    pub fn resume(&self, db: Option<&str>) -> bool {
        let mut p = self.paused.lock();
        let was = match db {
            None => {
                let was = p.all || !p.dbs.is_empty();
                p.all = false;
                p.dbs.clear();
                was
            }
            Some(d) => p.dbs.remove(d),
        };
        // RESUME (of everything) ends SUSPEND too.
        let was_suspended = db.is_none() && self.suspended.swap(false, Relaxed);
        let was = was || was_suspended;
        self.any_paused.store(p.all || !p.dbs.is_empty(), Relaxed);
        drop(p);
        self.resumed.notify_waiters();
        was
    }

    #[inline]
    pub fn is_paused(&self, db: &str) -> bool {
        if !self.any_paused.load(Relaxed) {
            return false;
        }
        let p = self.paused.lock();
        p.all || p.dbs.contains(db)
    }

    /// Whether everything is paused (SHOW STATE).
    pub fn all_paused(&self) -> bool {
        self.paused.lock().all
    }

    /// Waits until `db` is not paused.
    pub async fn wait_resumed(&self, db: &str) {
        loop {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !self.is_paused(db) {
                return;
            }
            resumed.await;
        }
    }

    /// SUSPEND: pauses everything and stops accepting connections (until RESUME).
    pub fn suspend(&self) {
        self.pause(None);
        self.suspended.store(true, Relaxed);
        self.suspending.notify_waiters();
    }

    /// Completes when SUSPEND begins (or at once if it has).
    pub async fn wait_suspended(&self) {
        loop {
            let n = self.suspending.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.is_suspended() {
                return;
            }
            n.await;
        }
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended.load(Relaxed)
    }

    /// Waits until SUSPEND is lifted.
    pub async fn wait_unsuspended(&self) {
        loop {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !self.is_suspended() {
                return;
            }
            resumed.await;
        }
    }

    pub fn disable(&self, db: &str) {
        self.disabled.lock().insert(db.to_string());
    }

    pub fn enable(&self, db: &str) -> bool {
        self.disabled.lock().remove(db)
    }

    pub fn is_disabled(&self, db: &str) -> bool {
        self.disabled.lock().contains(db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pause_holds_until_resume() {
        let c = std::sync::Arc::new(Control::default());
        assert!(!c.is_paused("a"));
        c.pause(Some("a"));
        assert!(c.is_paused("a") && !c.is_paused("b"));
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.wait_resumed("a").await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(c.resume(Some("a")));
        waiter.await.unwrap();
        c.pause(None);
        assert!(c.is_paused("b") && c.all_paused());
        assert!(c.resume(None));
        assert!(!c.is_paused("b"));
        c.disable("x");
        assert!(c.is_disabled("x"));
        assert!(c.enable("x") && !c.is_disabled("x"));
    }
}
