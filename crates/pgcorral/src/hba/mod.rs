//! `auth_type = hba`: PgBouncer's `auth_hba_file` in PostgreSQL's pg_hba.conf syntax and
//! meaning, and `auth_ident_file`, parsed and evaluated without I/O (the files are read through
//! [`file::Files`]): the first rule that matches a login's connection type, TLS, address,
//! database and user gives its method. A file with a line pgcorral cannot honour is refused
//! whole, as PostgreSQL refuses it.

mod file;
mod ident;
mod parse;
mod token;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

pub use file::{Disk, Files};
pub use ident::Ident;

use crate::config::{AuthType, General};

/// The rules `general` asks for, read from its files (none unless `auth_type = "hba"`); what
/// is suspicious but usable is logged as warnings. `Err`: the file cannot be used (a line
/// pgcorral cannot honour, or the file cannot be read), naming the file and line.
pub fn for_config(general: &General) -> Result<Hba, Refused> {
    if general.auth_type != AuthType::Hba {
        return Ok(Hba::default());
    }
    let (hba, warnings) = Hba::load(&general.auth_hba_file, &general.auth_ident_file)?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        file = %general.auth_hba_file,
        rules = hba.rules.len(),
        "hba rules loaded"
    );
    Ok(hba)
}

/// Why an hba file was refused: each line that cannot be used, as `file:line: why`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub file: String,
    pub errors: Vec<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hba file {} refused: {}",
            self.file,
            self.errors.join("; ")
        )
    }
}

impl std::error::Error for Refused {}

/// A rule's connection type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnType {
    /// The Unix socket.
    Local,
    /// TCP, with or without TLS.
    Host,
    HostSsl,
    HostNoSsl,
    /// GSSAPI-encrypted TCP, which pgcorral never has: the rule never matches.
    HostGssEnc,
    /// TCP without GSSAPI encryption: every TCP login.
    HostNoGssEnc,
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

/// A database or user column, as PostgreSQL reads it (`check_db`, `check_role`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    all: bool,
    /// Database column: the database named as the user.
    sameuser: bool,
    /// Database column (`samerole`, `samegroup`): the user is a member of the role named as
    /// the database.
    samerole: bool,
    /// Database column: physical replication connections (and only them).
    replication: bool,
    names: BTreeSet<String>,
    /// User column (`+role`): members of these roles, directly or not.
    groups: BTreeSet<String>,
}

impl Names {
    /// Whether the membership of the login's user must be known to match this column.
    fn asks_roles(&self) -> bool {
        self.samerole || !self.groups.is_empty()
    }
}

/// A rule's address column: IPv4 addresses are held in the low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    Local,
    All,
    /// One of this machine's addresses.
    SameHost,
    /// In the subnet of one of this machine's addresses.
    SameNet,
    Net {
        v6: bool,
        net: u128,
        mask: u128,
    },
}

/// An address as a (v6, bits) pair, IPv4 in the low 32 bits.
fn bits(ip: IpAddr) -> (bool, u128) {
    match ip.to_canonical() {
        IpAddr::V4(a) => (false, u32::from(a) as u128),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

impl Address {
    fn matches(&self, from: IpAddr, host: &dyn Host) -> Result<bool, Undecided> {
        let (v6, ip) = bits(from);
        Ok(match *self {
            Address::All => true,
            Address::Local => false,
            Address::Net { v6: rv6, net, mask } => rv6 == v6 && ip & mask == net,
            Address::SameHost | Address::SameNet => {
                let same_net = *self == Address::SameNet;
                let ifaces = host.interfaces().map_err(|e| {
                    Undecided::Interfaces(format!("error enumerating network interfaces: {e}"))
                })?;
                ifaces.iter().any(|&(addr, mask)| {
                    let ((iv6, a), (_, m)) = (bits(addr), bits(mask));
                    iv6 == v6
                        && match same_net {
                            true => a & m == ip & m,
                            false => a == ip,
                        }
                })
            }
        })
    }
}

/// What a login's evaluation needs from outside the file.
pub trait Host {
    /// This machine's interface addresses with their netmasks (for `samehost`, `samenet`).
    fn interfaces(&self) -> std::io::Result<Vec<(IpAddr, IpAddr)>>;
    /// The roles the login's user is a member of, directly or not, itself included (for
    /// `+role` and `samerole`); `None`: not looked up (yet).
    fn roles(&self) -> Option<&BTreeSet<String>>;
}

/// This machine's interfaces, and the memberships looked up so far.
pub struct Machine<'a> {
    pub roles: Option<&'a BTreeSet<String>>,
}

impl Host for Machine<'_> {
    fn interfaces(&self) -> std::io::Result<Vec<(IpAddr, IpAddr)>> {
        Ok(if_addrs::get_if_addrs()?
            .into_iter()
            .map(|i| match i.addr {
                if_addrs::IfAddr::V4(a) => (IpAddr::V4(a.ip), IpAddr::V4(a.netmask)),
                if_addrs::IfAddr::V6(a) => (IpAddr::V6(a.ip), IpAddr::V6(a.netmask)),
            })
            .collect())
    }

    fn roles(&self) -> Option<&BTreeSet<String>> {
        self.roles
    }
}

/// Why the rules could not decide a login yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undecided {
    /// A rule asks for the user's roles: look them up ([`Host::roles`]) and evaluate again.
    Roles,
    /// The machine's interfaces could not be listed: the login is refused.
    Interfaces(String),
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its file (the hba file, or one it includes) and line, for the logs.
    pub file: Arc<str>,
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
    /// Parses an hba file's `text` (from `file`, whose directory `@file` lists and includes
    /// are relative to); `files` reads those. `Ok` has the rules and warnings that do not
    /// stop a line; `Err` every line that cannot be used: the file is refused, as PostgreSQL
    /// refuses it.
    pub fn parse(
        file: &Path,
        text: &str,
        ident: Ident,
        files: &mut dyn Files,
    ) -> Result<(Hba, Vec<String>), Refused> {
        let (rules, warnings, errors) = {
            let mut read = file::Read::new(&ident, files);
            read.text(file, text, 0);
            (read.rules, read.warnings, read.errors)
        };
        match errors.is_empty() {
            true => Ok((Hba { rules, ident }, warnings)),
            false => Err(Refused {
                file: file.display().to_string(),
                errors,
            }),
        }
    }

    /// Reads `hba_file` and `ident_file` (when not empty). An hba file that cannot be read is
    /// refused; an ident file that cannot be read gives no maps (a rule naming one of its maps
    /// is then refused), and its bad lines are skipped with a warning (a map only grants).
    pub fn load(hba_file: &str, ident_file: &str) -> Result<(Hba, Vec<String>), Refused> {
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
        let text = std::fs::read_to_string(hba_file).map_err(|e| Refused {
            file: hba_file.to_string(),
            errors: vec![format!("could not open hba config file {hba_file}: {e}")],
        })?;
        let (hba, w) = Hba::parse(Path::new(hba_file), &text, ident, &mut Disk)?;
        warnings.extend(w);
        Ok((hba, warnings))
    }

    /// The first rule that matches `login`, if any; [`Undecided`] when a rule needs what
    /// `host` could not give (the user's roles are looked up only when a rule asks).
    pub fn eval(&self, login: &Login<'_>, host: &dyn Host) -> Result<Option<&Rule>, Undecided> {
        for r in &self.rules {
            let kind = match (login.from, r.kind) {
                (None, ConnType::Local) => true,
                (None, _) | (Some(_), ConnType::Local) => false,
                (Some(_), ConnType::HostSsl) => login.tls,
                (Some(_), ConnType::HostNoSsl) => !login.tls,
                (Some(_), ConnType::Host | ConnType::HostNoGssEnc) => true,
                (Some(_), ConnType::HostGssEnc) => false,
            };
            if !kind {
                continue;
            }
            if let Some(ip) = login.from {
                if !r.address.matches(ip, host)? {
                    continue;
                }
            }
            if (r.databases.asks_roles() || r.users.asks_roles()) && host.roles().is_none() {
                // Asked only when the roles decide: the rule would match with some roles, and
                // does not match with none.
                let none = BTreeSet::new();
                if database(r, login, Some(&none)) && user(r, login, Some(&none)) {
                    return Ok(Some(r));
                }
                if !database(r, login, None) || !user(r, login, None) {
                    continue;
                }
                return Err(Undecided::Roles);
            }
            let roles = host.roles();
            if database(r, login, roles) && user(r, login, roles) {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Whether a rule asks for the users' roles (`+role`, `samerole`).
    pub fn asks_roles(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.databases.asks_roles() || r.users.asks_roles())
    }
}

/// PostgreSQL's `check_db`; `roles: None` takes `samerole` as matching.
fn database(r: &Rule, login: &Login<'_>, roles: Option<&BTreeSet<String>>) -> bool {
    let d = &r.databases;
    if login.replication {
        return d.replication;
    }
    d.all
        || (d.sameuser && login.database == login.user)
        || (d.samerole && roles.is_none_or(|m| m.contains(login.database)))
        || d.names.contains(login.database)
}

/// PostgreSQL's `check_role`; `roles: None` takes every `+role` as matching.
fn user(r: &Rule, login: &Login<'_>, roles: Option<&BTreeSet<String>>) -> bool {
    let u = &r.users;
    u.all
        || u.names.contains(login.user)
        || match roles {
            None => !u.groups.is_empty(),
            Some(m) => u.groups.iter().any(|g| m.contains(g)),
        }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_rules;
