//! PgBouncer's signals (as of 1.23), logged in its words: SIGHUP reloads, SIGTERM stops once
//! the clients have left, SIGINT once the servers are released (a second of either: at once),
//! SIGQUIT exits at once, SIGUSR1 pauses everything, SIGUSR2 resumes.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::admin;
use crate::reload;
use crate::services::{Services, Stop};

/// The handlers, installed before the port is bound: a client (or a test) may send a signal as
/// soon as it can connect, and SIGHUP's default action would end the process.
pub struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
    quit: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    /// Installs them, on the caller's runtime (the main thread's).
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Acts on signals until the process ends.
    pub async fn run(mut self, services: Services) {
        loop {
            tokio::select! {
                Some(()) = self.hup.recv() => hup(&services),
                Some(()) = self.term.recv() => stop(&services, Stop::WaitForClients),
                Some(()) = self.int.recv() => stop(&services, Stop::WaitForServers),
                Some(()) = self.quit.recv() => {
                    tracing::info!("got SIGQUIT, fast exit");
                    services.shutdown.begin(Stop::Immediate);
                }
                Some(()) = self.usr1.recv() => usr1(&services),
                Some(()) = self.usr2.recv() => usr2(&services),
                else => return,
            }
        }
    }
}

/// SIGHUP reads the config file again (see [`reload`]); a bad file is logged and the running
/// configuration stays.
fn hup(services: &Services) {
    tracing::info!("got SIGHUP, re-reading config");
    if let Err(e) = reload::reload(services) {
        tracing::error!(error = %e, "reload refused; the running configuration stays");
    }
}

/// SIGTERM (`WaitForClients`) and SIGINT (`WaitForServers`); while stopping already, either
/// exits at once.
fn stop(services: &Services, mode: Stop) {
    let name = match mode {
        Stop::WaitForClients => "SIGTERM",
        _ => "SIGINT",
    };
    let shutdown = &services.shutdown;
    if shutdown.is_stopping() {
        tracing::info!("got {name} while shutting down, fast exit");
        shutdown.begin(Stop::Immediate);
        return;
    }
    match mode {
        Stop::WaitForClients => {
            tracing::info!("got SIGTERM, shutting down, waiting for all clients disconnect")
        }
        _ => tracing::info!(
            "got SIGINT, shutting down, waiting for all servers connections to be released"
        ),
    }
    if services.control.is_suspended() {
        tracing::info!("suspend was in progress, going down immediately");
        shutdown.begin(Stop::Immediate);
        return;
    }
    shutdown.begin(mode);
}

/// SIGUSR1: PAUSE (of everything).
#[allow(clippy::disallowed_methods)] // on the main thread's runtime, as the signals are
fn usr1(services: &Services) {
    if services.control.all_paused() || services.control.is_suspended() {
        tracing::info!("got SIGUSR1, but already paused/suspended");
        return;
    }
    tracing::info!("got SIGUSR1, pausing all activity");
    let services = services.clone();
    tokio::spawn(async move { admin::pause_all(&services).await });
}

/// SIGUSR2: RESUME, from PAUSE or SUSPEND.
fn usr2(services: &Services) {
    let control = &services.control;
    if services.shutdown.is_stopping() {
        tracing::info!("got SIGUSR2 while shutting down, ignoring");
    } else if control.is_suspended() {
        tracing::info!("got SIGUSR2, continuing from SUSPEND");
        control.resume(None);
    } else if control.all_paused() {
        tracing::info!("got SIGUSR2, continuing from PAUSE");
        control.resume(None);
    } else {
        tracing::info!("got SIGUSR2, but not paused/suspended");
    }
}
