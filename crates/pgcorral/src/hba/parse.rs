//! One line of an hba file, parsed as PostgreSQL's `parse_hba_line` reads it: the connection
//! type, the databases and users (keywords, `+role`, `@file` lists), the address (`all`,
//! `samehost`, `samenet`, `addr/bits` or `addr mask`), the method and its `map=` option. What
//! pgcorral cannot honour (a host name, a regular expression, a method or option it does not
//! implement) is an error, which refuses the file.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use super::file::{relative, Files, MAX_DEPTH};
use super::ident::Ident;
use super::token::{tokens, Cursor, Token};
use super::{Address, ConnType, Method, Names, Rule};

/// Methods PostgreSQL has and pgcorral does not implement.
const UNSUPPORTED_METHODS: &[&str] = &[
    "ident", "ldap", "pam", "gss", "sspi", "radius", "bsd", "oauth",
];

/// Parses one line of `file` (its rule's file and line are the caller's to set); `warn` gets
/// what does not stop the line. `Ok(None)`: a blank or comment line.
pub fn rule(
    text: &str,
    file: &Path,
    ident: &Ident,
    files: &mut dyn Files,
    warn: &mut Vec<String>,
) -> Result<Option<Rule>, String> {
    let mut t = Cursor::new(tokens(text)?);
    if t.at_end() {
        return Ok(None);
    }
    let kind = match t.next() {
        Token::Word(w) => match w.as_str() {
            "local" => ConnType::Local,
            "host" => ConnType::Host,
            "hostssl" => ConnType::HostSsl,
            "hostnossl" => ConnType::HostNoSsl,
            "hostgssenc" => ConnType::HostGssEnc,
            "hostnogssenc" => ConnType::HostNoGssEnc,
            _ => return Err(format!("invalid connection type \"{w}\"")),
        },
        _ => return Err("invalid connection type".into()),
    };
    let databases = names(&mut t, Column::Database, file, files, 0)?;
    let users = names(&mut t, Column::User, file, files, 0)?;
    let address = match kind {
        ConnType::Local => Address::Local,
        _ => address(&mut t, warn)?,
    };
    let method = match t.next() {
        Token::Word(w) => match w.as_str() {
            "trust" => Method::Trust,
            "reject" => Method::Reject,
            "md5" => Method::Md5,
            "password" => Method::Password,
            "peer" => Method::Peer,
            "cert" => Method::Cert,
            "scram-sha-256" => Method::ScramSha256,
            w if UNSUPPORTED_METHODS.contains(&w) => {
                return Err(format!(
                    "authentication method \"{w}\" is not supported by pgcorral"
                ))
            }
            _ => return Err(format!("invalid authentication method \"{w}\"")),
        },
        _ => return Err("end-of-line before authentication method".into()),
    };
    let mut map = None;
    while !t.at_end() {
        let option = match t.next() {
            Token::Word(w) | Token::Quoted(w) => w,
            _ => return Err("invalid authentication option".into()),
        };
        let Some(name) = option.strip_prefix("map=") else {
            return Err(format!(
                "authentication option \"{option}\" is not supported by pgcorral (only map=NAME)"
            ));
        };
        if !matches!(method, Method::Peer | Method::Cert) {
            return Err(format!(
                "authentication option \"map\" is only valid for authentication methods peer and cert, not {}",
                method.name()
            ));
        }
        if !ident.has_map(name) {
            return Err(format!("ident map \"{name}\" is not in auth_ident_file"));
        }
        map = Some(name.to_string());
    }
    Ok(Some(Rule {
        file: Arc::from(""),
        line: 0,
        kind,
        databases,
        users,
        address,
        method,
        map,
    }))
}

/// Which column a list is in: the keywords differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Database,
    User,
}

/// A comma-separated list of names and keywords.
fn names(
    t: &mut Cursor,
    column: Column,
    file: &Path,
    files: &mut dyn Files,
    depth: usize,
) -> Result<Names, String> {
    let mut names = Names::default();
    add_names(&mut names, t, column, file, files, depth)?;
    Ok(names)
}

fn add_names(
    names: &mut Names,
    t: &mut Cursor,
    column: Column,
    file: &Path,
    files: &mut dyn Files,
    depth: usize,
) -> Result<(), String> {
    loop {
        match (t.next(), column) {
            (Token::Word(w), _) if w == "all" => names.all = true,
            (Token::Word(w), Column::Database) if w == "sameuser" => names.sameuser = true,
            (Token::Word(w), Column::Database) if w == "samerole" || w == "samegroup" => {
                names.samerole = true
            }
            (Token::Word(w), Column::Database) if w == "replication" => names.replication = true,
            (Token::Word(w), Column::User) if w.starts_with('+') => match &w[1..] {
                "" => return Err("a role name is missing after \"+\"".into()),
                role => {
                    names.groups.insert(role.to_string());
                }
            },
            (Token::Word(w), _) if w.starts_with('@') => {
                include(names, &w[1..], column, file, files, depth)?
            }
            (Token::Word(w), _) if w.starts_with('/') => {
                return Err(format!(
                    "regular expressions (\"{w}\") are not supported by pgcorral"
                ))
            }
            (Token::Word(w) | Token::Quoted(w), _) => {
                names.names.insert(w);
            }
            _ => return Err("end-of-line before a database or role name".into()),
        }
        if *t.peek() != Token::Comma {
            return Ok(());
        }
        t.next();
    }
}

/// `@name`: the names listed in a file, relative to the including file's directory, read as
/// if written in place (keywords included). Names may be separated by commas or whitespace,
/// and blank and comment lines are skipped, as in PostgreSQL; a list that cannot be read
/// refuses the file (PostgreSQL reads it as empty, which can skip a `reject` rule).
fn include(
    names: &mut Names,
    name: &str,
    column: Column,
    file: &Path,
    files: &mut dyn Files,
    depth: usize,
) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!("@{name}: lists included {MAX_DEPTH} deep"));
    }
    let path = relative(file, name);
    let text = files
        .read(&path)
        .map_err(|e| format!("could not read {}: {e}", path.display()))?;
    for line in text.lines() {
        let mut t = Cursor::new(tokens(line).map_err(|e| format!("{}: {e}", path.display()))?);
        while !t.at_end() {
            add_names(names, &mut t, column, &path, files, depth + 1)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// `all`, `samehost`, `samenet`, `addr/bits`, or `addr` then a mask in the next token. A
/// host name is refused: PostgreSQL resolves the client's address and checks that the name
/// resolves back to it, which pgcorral does not do.
fn address(t: &mut Cursor, warn: &mut Vec<String>) -> Result<Address, String> {
    let word = match t.next() {
        Token::Word(w) => match w.as_str() {
            "all" => return Ok(Address::All),
            "samehost" => return Ok(Address::SameHost),
            "samenet" => return Ok(Address::SameNet),
            _ => w,
        },
        Token::Quoted(w) => w,
        _ => return Err("end-of-line before IP address".into()),
    };
    let (addr, bits) = match word.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (word.as_str(), None),
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return Err(match bits {
            Some(_) => format!("invalid IP address \"{addr}\""),
            None => {
                format!("host names (\"{addr}\") are not supported by pgcorral: write the address")
            }
        });
    };
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let mask = match bits {
        Some(b) => {
            let bits: u32 = b
                .parse()
                .ok()
                .filter(|&n| n <= width)
                .ok_or_else(|| format!("invalid CIDR mask in address \"{word}\""))?;
            prefix_mask(bits, width)
        }
        None => {
            let (Token::Word(m) | Token::Quoted(m)) = t.next() else {
                return Err(format!("end-of-line before netmask after \"{word}\""));
            };
            match (addr, m.parse::<IpAddr>()) {
                (IpAddr::V4(_), Ok(IpAddr::V4(m))) => u32::from(m) as u128,
                (IpAddr::V6(_), Ok(IpAddr::V6(m))) => u128::from(m),
                _ => return Err(format!("invalid IP mask \"{m}\"")),
            }
        }
    };
    let net = match addr {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    };
    if net & !mask & width_mask(width) != 0 {
        warn.push(format!(
            "address {addr} has bits outside its mask; they are ignored"
        ));
    }
    Ok(Address::Net {
        v6: addr.is_ipv6(),
        net: net & mask,
        mask,
    })
}

fn width_mask(width: u32) -> u128 {
    match width {
        128 => u128::MAX,
        w => (1u128 << w) - 1,
    }
}

/// The mask of a `bits`-long prefix, in the low `width` bits.
fn prefix_mask(bits: u32, width: u32) -> u128 {
    match bits {
        0 => 0,
        b => width_mask(width) & !width_mask(width - b),
    }
}
