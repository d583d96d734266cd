//! `auth_type = hba`: PgBouncer's `auth_hba_file` (pg_hba.conf syntax) and `auth_ident_file`,
//! parsed and evaluated without I/O (the files are read by [`Hba::load`]): the first rule that
//! matches a login's connection type, TLS, address, database and user gives its method.

mod ident;
mod parse;
mod token;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

pub use ident::Ident;

use crate::config::{AuthType, General};

/// The rules `general` asks for, read from its files (none unless `auth_type = "hba"`); what
/// is wrong in them is logged as warnings, naming file and line.
pub fn for_config(general: &General) -> Hba {
    if general.auth_type != AuthType::Hba {
        return Hba::default();
    }
    let (hba, warnings) = Hba::load(&general.auth_hba_file, &general.auth_ident_file);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        file = %general.auth_hba_file,
        rules = hba.rules.len(),
        "hba rules loaded"
    );
    hba
}

/// A rule's connection type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnType {
    /// The Unix socket.
    Local,
    /// TCP, with or without TLS.
    Host,
    HostSsl,
    HostNoSsl,
}

/// A rule's authentication method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Trust,
    Reject,
    Md5,
    /// PgBouncer's clear-text `password`; pgcorral asks for md5 instead, as for auth_type plain.
    Password,
    /// The Unix socket's peer: its OS user name must be the user (or map to it).
    Peer,
    Cert,
    ScramSha256,
}

impl Method {
    /// The method's name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Method::Trust => "trust",
            Method::Reject => "reject",
            Method::Md5 => "md5",
            Method::Password => "password",
            Method::Peer => "peer",
            Method::Cert => "cert",
            Method::ScramSha256 => "scram-sha-256",
        }
    }
}

/// A database or user column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    all: bool,
    /// Database column: the database named as the user (user column: the user named as the
    /// database, PgBouncer's quirk).
    sameuser: bool,
    /// Matches physical replication connections (and only them).
    replication: bool,
    names: BTreeSet<String>,
}

impl Names {
    fn matches(&self, name: &str, pair: &str) -> bool {
        self.all || (self.sameuser && name == pair) || self.names.contains(name)
    }
}

/// A rule's address column: IPv4 addresses are held in the low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    Local,
    All,
    Net { v6: bool, net: u128, mask: u128 },
}

impl Address {
    fn matches(&self, from: IpAddr) -> bool {
        match (*self, from.to_canonical()) {
            (Address::All, _) => true,
            (
                Address::Net {
                    v6: false,
                    net,
                    mask,
                },
                IpAddr::V4(a),
            ) => u32::from(a) as u128 & mask == net,
            (
                Address::Net {
                    v6: true,
                    net,
                    mask,
                },
                IpAddr::V6(a),
            ) => u128::from(a) & mask == net,
            _ => false,
        }
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its line in the file, for the logs.
    pub line: usize,
    pub kind: ConnType,
    databases: Names,
    users: Names,
    address: Address,
    pub method: Method,
    /// `map=NAME`, a map of the ident file (for `peer` and `cert`).
    pub map: Option<String>,
}

/// A login, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Login<'a> {
    /// `None`: the Unix socket.
    pub from: Option<IpAddr>,
    pub tls: bool,
    /// A physical replication connection (`replication=true`).
    pub replication: bool,
    pub database: &'a str,
    pub user: &'a str,
}

/// The rules of an hba file and the ident maps they use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hba {
    rules: Vec<Rule>,
    pub ident: Ident,
}

impl Hba {
    /// Parses an hba file's `text` (from `file`, whose directory `@file` lists are relative to);
    /// `read` reads those lists. A line that cannot be used is skipped, and said so in the
    /// warnings (as PgBouncer; PostgreSQL refuses the whole file).
    pub fn parse(
        file: &Path,
        text: &str,
        ident: Ident,
        read: &mut dyn FnMut(&Path) -> std::io::Result<String>,
    ) -> (Hba, Vec<String>) {
        let mut hba = Hba {
            rules: Vec::new(),
            ident,
        };
        let mut warnings = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match parse::line(line, n + 1, file, &hba.ident, read, &mut warnings) {
                parse::Line::Empty => {}
                parse::Line::Rule(r) => hba.rules.push(r),
                parse::Line::Bad(why) => warnings.push(format!(
                    "{}:{}: could not parse hba config line {}: {why}; the line is skipped",
                    file.display(),
                    n + 1,
                    n + 1
                )),
            }
        }
        (hba, warnings)
    }

    /// Reads `hba_file` and `ident_file` (when not empty). A file that cannot be read is a
    /// warning and gives no rules (every login is refused) or no maps, as PgBouncer.
    pub fn load(hba_file: &str, ident_file: &str) -> (Hba, Vec<String>) {
        let mut warnings = Vec::new();
        let ident = match ident_file {
            "" => Ident::default(),
            f => match std::fs::read_to_string(f) {
                Ok(text) => {
                    let (ident, w) = Ident::parse(f, &text);
                    warnings.extend(w);
                    ident
                }
                Err(e) => {
                    warnings.push(format!("could not open ident config file {f}: {e}"));
                    Ident::default()
                }
            },
        };
        let text = match std::fs::read_to_string(hba_file) {
            Ok(t) => t,
            Err(e) => {
                warnings.push(format!(
                    "could not open hba config file {hba_file}: {e}; every login is refused"
                ));
                String::new()
            }
        };
        let mut read = |p: &Path| std::fs::read_to_string(p);
        let (hba, w) = Hba::parse(Path::new(hba_file), &text, ident, &mut read);
        warnings.extend(w);
        (hba, warnings)
    }

    /// The first rule that matches `login`, if any.
    pub fn eval(&self, login: &Login<'_>) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            let kind = match (login.from, r.kind) {
                (None, ConnType::Local) => true,
                (None, _) | (Some(_), ConnType::Local) => false,
                (Some(_), ConnType::HostSsl) => login.tls,
                (Some(_), ConnType::HostNoSsl) => !login.tls,
                (Some(_), ConnType::Host) => true,
            };
            let address = match login.from {
                Some(ip) => r.address.matches(ip),
                None => true,
            };
            let database = match login.replication {
                true => r.databases.replication,
                false => r.databases.matches(login.database, login.user),
            };
            kind && address && database && r.users.matches(login.user, login.database)
        })
    }
}

#[cfg(test)]
mod tests;
