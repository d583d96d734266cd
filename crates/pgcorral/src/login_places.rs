//! The login budget's places: connections still logging in, shared fairly between the source
//! addresses they come from, with a few places kept for console logins over TCP and for the
//! Unix socket.
//!
//! A connection takes a place at accept and gives it back when it has authenticated (or its
//! login failed). Three kinds of places:
//!
//! * the budget's own (`max_login_clients`): a source holding none may take any free place; a
//!   source holding some may take another while it holds less than its share,
//!   `max(1, budget / (n + 1))`, and while a newcomer's share, `budget / (n + 2)`, stays free,
//!   `n` being the number of sources holding such places now. So whatever the sources holding
//!   places do, room is left for a source not seen yet (a lone source holds at most half);
//! * [`CONSOLE_RESERVE`] places for TCP connections the budget refused: such a connection may
//!   log in to the admin console only (its startup packet must name it; the console then takes
//!   admin and stats users only), and a source holds at most its share of these too;
//! * [`UNIX_RESERVE`] places for Unix-socket connections the budget refused.
//!
//! A source is an IPv4 address, an IPv6 /64 (what one host or site is usually given), or the
//! Unix socket (one class). Sources are kept only while they hold places, so the table never
//! holds more entries than there are connections logging in (at most the budget and the two
//! reserves): memory stays bounded whatever addresses connect.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::error::{Error, Kind};

/// Places beyond the login budget for TCP connections that may log in to the admin console
/// only, so that admin and stats users reach it over TCP while others use the budget up.
pub const CONSOLE_RESERVE: usize = 8;

/// Places beyond the login budget for connections over the Unix socket, so that a local
/// administrator gets in while TCP connections use the budget up.
pub const UNIX_RESERVE: usize = 8;

/// What a connection refused a place is told (53300): at accept, or after its startup packet
/// when it took a place kept for the console and named another database.
pub fn refusal() -> Error {
    Error::new(
        Kind::TooManyClients,
        "no more connections allowed (max_login_clients: too many clients logging in)",
    )
}

/// Where a connection logging in comes from, as the places are shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// An IPv4 address (an IPv4-mapped IPv6 address counts as its IPv4 address).
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
    /// The Unix socket.
    Unix,
}

impl Source {
    /// The source of a TCP peer at `ip`, or of the Unix socket (`None`).
    pub fn of(ip: Option<IpAddr>) -> Source {
        match ip.map(|ip| ip.to_canonical()) {
            None => Source::Unix,
            Some(IpAddr::V4(a)) => Source::V4(a.to_bits()),
            Some(IpAddr::V6(a)) => Source::V6((a.to_bits() >> 64) as u64),
        }
    }
}

/// Which kind of place a connection holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// One of the budget's own.
    Budget,
    /// One of [`CONSOLE_RESERVE`]: the console only.
    Console,
    /// One of [`UNIX_RESERVE`].
    Unix,
}

/// The places in use, by source and by kind.
#[derive(Default)]
pub struct Places(parking_lot::Mutex<Table>);

#[derive(Default)]
struct Table {
    /// Places held, by source: (the budget's, the console's); the Unix socket's reserve is
    /// not shared.
    by_source: HashMap<Source, (usize, usize)>,
    /// Sources holding places of the budget, and of the console's reserve.
    sources: (usize, usize),
    /// Places held of the budget, of the console's reserve, of the Unix socket's.
    held: [usize; 3],
}

impl Places {
    /// Takes a place for a connection from `source` with a login budget of `budget` places:
    /// the budget's when [`fits`] says so, else one of its reserve (the console's for TCP,
    /// under the same rule; the Unix socket's). `None`: no place for it.
    pub fn take(&self, source: Source, budget: usize) -> Option<Lane> {
        let mut guard = self.0.lock();
        let t = &mut *guard;
        let mine = t.by_source.get(&source).copied().unwrap_or((0, 0));
        let lane = if fits(budget, t.held[0], t.sources.0, mine.0) {
            Lane::Budget
        } else if source == Source::Unix {
            (t.held[2] < UNIX_RESERVE).then_some(Lane::Unix)?
        } else if fits(CONSOLE_RESERVE, t.held[1], t.sources.1, mine.1) {
            Lane::Console
        } else {
            return None;
        };
        t.held[lane as usize] += 1;
        if lane != Lane::Unix {
            let console = lane == Lane::Console;
            let entry = t.by_source.entry(source).or_default();
            let held = match console {
                false => &mut entry.0,
                true => &mut entry.1,
            };
            *held += 1;
            if *held == 1 {
                match console {
                    false => t.sources.0 += 1,
                    true => t.sources.1 += 1,
                }
            }
        }
        Some(lane)
    }

    /// Gives back a place [`Places::take`] gave `source` in `lane`.
    pub fn give_back(&self, source: Source, lane: Lane) {
        let mut guard = self.0.lock();
        let t = &mut *guard;
        t.held[lane as usize] -= 1;
        if lane == Lane::Unix {
            return;
        }
        let console = lane == Lane::Console;
        let Some(entry) = t.by_source.get_mut(&source) else {
            return;
        };
        let held = match console {
            false => &mut entry.0,
            true => &mut entry.1,
        };
        *held -= 1;
        let (now, empty) = (*held, *entry == (0, 0));
        if empty {
            t.by_source.remove(&source);
        }
        if now == 0 {
            match console {
                false => t.sources.0 -= 1,
                true => t.sources.1 -= 1,
            }
        }
    }

    /// Connections logging in now, in every kind of place (SHOW LISTS' login_clients).
    pub fn in_use(&self) -> usize {
        self.0.lock().held.iter().sum()
    }

    /// Places of the budget in use now.
    pub fn of_budget(&self) -> usize {
        self.0.lock().held[Lane::Budget as usize]
    }

    /// Sources holding places now (of the budget or the console's reserve).
    pub fn sources(&self) -> usize {
        self.0.lock().by_source.len()
    }
}

/// Whether a source holding `mine` of `places` places may take one more, `held` of them being
/// held by `sources` sources: a source holding none may take any free place; one holding some
/// only while it holds less than its share, `max(1, places / (sources + 1))`, and while the
/// places left free stay at least a newcomer's share, `places / (sources + 2)`. So sources that
/// came first keep room for those that come later, whatever they do.
fn fits(places: usize, held: usize, sources: usize, mine: usize) -> bool {
    if held >= places {
        return false;
    }
    if mine == 0 {
        return true;
    }
    let share = (places / (sources + 1)).max(1);
    let keep = places / (sources + 2);
    mine < share && held + 1 + keep <= places
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(last: u8) -> Source {
        Source::of(Some(IpAddr::from([10, 0, 0, last])))
    }

    /// Takes places for `source` until refused; how many of each kind it got.
    fn fill(p: &Places, source: Source, budget: usize) -> (usize, usize) {
        let mut got = (0, 0);
        while let Some(lane) = p.take(source, budget) {
            match lane {
                Lane::Budget => got.0 += 1,
                _ => got.1 += 1,
            }
        }
        got
    }

    #[test]
    fn a_lone_source_holds_half_and_the_console_s_half_leaving_room_for_another() {
        let p = Places::default();
        assert_eq!(fill(&p, v4(1), 20), (10, CONSOLE_RESERVE / 2));
        // A second source: up to a third of the budget while a quarter stays free (the first
        // keeps what it holds), and its share of the console's places.
        assert_eq!(fill(&p, v4(2), 20), (5, 2));
        // A third one still finds room.
        assert_eq!(p.take(v4(3), 20), Some(Lane::Budget));
    }

    #[test]
    fn sources_that_fill_what_they_may_one_after_another_leave_room_for_the_next() {
        let p = Places::default();
        let got: Vec<_> = (1..=4).map(|i| fill(&p, v4(i), 20).0).collect();
        assert_eq!(got, [10, 5, 1, 1]);
        // However many came before, newcomers find the places kept free.
        for i in 5..=7 {
            assert_eq!(p.take(v4(i), 20), Some(Lane::Budget));
        }
        assert_eq!(p.of_budget(), 20);
    }

    #[test]
    fn many_sources_fill_the_budget_then_the_console_s_reserve() {
        let p = Places::default();
        let got: Vec<_> = (0..10).map(|i| p.take(v4(i), 5)).collect();
        let budget = got.iter().filter(|l| **l == Some(Lane::Budget)).count();
        let console = got.iter().filter(|l| **l == Some(Lane::Console)).count();
        assert_eq!((budget, console), (5, 5));
        assert_eq!(p.in_use(), 10);
        assert_eq!(p.of_budget(), 5);
    }

    #[test]
    fn the_unix_socket_is_one_source_with_its_own_reserve() {
        let p = Places::default();
        let got = fill(&p, Source::of(None), 4);
        assert_eq!(got, (2, UNIX_RESERVE));
        // TCP sources still have the rest of the budget and the console's reserve.
        assert_eq!(p.take(v4(1), 4), Some(Lane::Budget));
        assert_eq!(p.take(v4(1), 4), Some(Lane::Console));
    }

    #[test]
    fn places_given_back_leave_no_entry_behind() {
        let p = Places::default();
        let mut taken = Vec::new();
        for i in 0..=255u8 {
            let s = v4(i);
            if let Some(lane) = p.take(s, 100) {
                taken.push((s, lane));
            }
        }
        assert_eq!(taken.len(), 100 + CONSOLE_RESERVE);
        assert_eq!(p.sources(), 100 + CONSOLE_RESERVE);
        for (s, lane) in taken {
            p.give_back(s, lane);
        }
        assert_eq!((p.in_use(), p.sources()), (0, 0));
        // And the shares are whole again.
        assert_eq!(fill(&p, v4(1), 100).0, 50);
    }

    #[test]
    fn ipv6_sources_are_their_64_bit_prefix_and_mapped_ipv4_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::of(Some(a)), Source::of(Some(b)));
        assert_ne!(Source::of(Some(a)), Source::of(Some(c)));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Source::of(Some(mapped)), v4(1));
    }
}
