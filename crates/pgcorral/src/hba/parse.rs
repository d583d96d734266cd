//! One line of an hba file, parsed as PgBouncer's `parse_line` does: the connection type, the
//! databases and users (with `@file` lists), the address (`addr/bits` or `addr mask`), the
//! method and its `map=` option.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::ident::Ident;
use super::token::{tokens, Cursor, Token};
use super::{Address, ConnType, Method, Names, Rule};

/// Reads an `@file` list (given its path, already joined to the including file's directory).
pub type ReadFile<'a> = &'a mut dyn FnMut(&Path) -> std::io::Result<String>;

/// What one line gave.
pub enum Line {
    Empty,
    Rule(Rule),
    /// The line is skipped; why, and warnings that do not skip it (an address with bits
    /// outside its mask).
    Bad(String),
}

/// Parses line `number` of `file`; `warn` gets what does not stop the line.
pub fn line(
    text: &str,
    number: usize,
    file: &Path,
    ident: &Ident,
    read: ReadFile<'_>,
    warn: &mut Vec<String>,
) -> Line {
    match rule(text, number, file, ident, read, warn) {
        Ok(Some(r)) => Line::Rule(r),
        Ok(None) => Line::Empty,
        Err(why) => Line::Bad(why),
    }
}

fn rule(
    text: &str,
    number: usize,
    file: &Path,
    ident: &Ident,
    read: ReadFile<'_>,
    warn: &mut Vec<String>,
) -> Result<Option<Rule>, String> {
    let mut t = Cursor::new(tokens(text)?);
    if t.at_end() {
        return Ok(None);
    }
    let kind = match t.next() {
        Token::Word(w) if w == "local" => ConnType::Local,
        Token::Word(w) if w == "host" => ConnType::Host,
        Token::Word(w) if w == "hostssl" => ConnType::HostSsl,
        Token::Word(w) if w == "hostnossl" => ConnType::HostNoSsl,
        Token::Word(w) => return Err(format!("unknown connection type \"{w}\"")),
        _ => return Err("unknown connection type".into()),
    };
    let databases = names(&mut t, file, read, 0)?;
    let users = names(&mut t, file, read, 0)?;
    let address = match kind {
        ConnType::Local => Address::Local,
        _ if t.keyword("all") => Address::All,
        _ => address(&mut t, file, number, warn)?,
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
            _ => return Err(format!("unsupported method \"{w}\"")),
        },
        _ => return Err("no authentication method".into()),
    };
    let mut map = None;
    if let Token::Word(w) = t.peek().clone() {
        let Some(name) = w.strip_prefix("map=") else {
            return Err(format!("unsupported option \"{w}\" (only map=NAME)"));
        };
        if !ident.has_map(name) {
            return Err(format!("ident map \"{name}\" is not in auth_ident_file"));
        }
        map = Some(name.to_string());
        t.next();
    }
    if !t.at_end() {
        return Err("unsupported parameters".into());
    }
    Ok(Some(Rule {
        line: number,
        kind,
        databases,
        users,
        address,
        method,
        map,
    }))
}

/// `@file` lists may include others; this deep, they are taken for a loop.
const MAX_INCLUDE_DEPTH: usize = 10;

/// A comma-separated list of names and keywords (the user column takes the database
/// column's keywords too, as PgBouncer's).
fn names(t: &mut Cursor, file: &Path, read: ReadFile<'_>, depth: usize) -> Result<Names, String> {
    let mut names = Names::default();
    add_names(&mut names, t, file, read, depth)?;
    Ok(names)
}

fn add_names(
    names: &mut Names,
    t: &mut Cursor,
    file: &Path,
    read: ReadFile<'_>,
    depth: usize,
) -> Result<(), String> {
    loop {
        match t.next() {
            Token::Word(w) => match w.as_str() {
                "all" => names.all = true,
                "sameuser" => names.sameuser = true,
                "replication" => names.replication = true,
                "samerole" | "samegroup" => return Err(format!("{w} is not supported")),
                _ if w.starts_with('+') => {
                    return Err(format!("group names (\"{w}\") are not supported"))
                }
                _ if w.starts_with('@') => include(names, &w[1..], file, read, depth)?,
                _ => {
                    names.names.insert(w);
                }
            },
            Token::Quoted(q) => {
                names.names.insert(q);
            }
            _ => return Err("a database or user name is missing".into()),
        }
        if *t.peek() != Token::Comma {
            return Ok(());
        }
        t.next();
    }
}

/// `@name`: the names listed in a file, relative to the including file's directory. Blank and
/// comment lines are skipped, and names may be separated by whitespace too, as in PostgreSQL
/// (PgBouncer refuses a blank line there, and reads one list per line).
fn include(
    names: &mut Names,
    name: &str,
    file: &Path,
    read: ReadFile<'_>,
    depth: usize,
) -> Result<(), String> {
    if depth >= MAX_INCLUDE_DEPTH {
        return Err(format!("@{name}: lists included {MAX_INCLUDE_DEPTH} deep"));
    }
    let path = match Path::new(name).is_absolute() {
        true => PathBuf::from(name),
        false => file.parent().unwrap_or(Path::new("")).join(name),
    };
    let text = read(&path).map_err(|e| format!("could not read {}: {e}", path.display()))?;
    for line in text.lines() {
        let mut t = Cursor::new(tokens(line).map_err(|e| format!("{}: {e}", path.display()))?);
        // Names are separated by commas or whitespace, as in PostgreSQL.
        while !t.at_end() {
            add_names(names, &mut t, &path, read, depth + 1)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// `addr/bits`, or `addr` then a mask in the next token.
fn address(
    t: &mut Cursor,
    file: &Path,
    number: usize,
    warn: &mut Vec<String>,
) -> Result<Address, String> {
    let Token::Word(word) = t.next() else {
        return Err("no address".into());
    };
    let (addr, bits) = match word.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (word.as_str(), None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("invalid IP address \"{addr}\" (host names are not supported)"))?;
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
            let Token::Word(m) = t.next() else {
                return Err(format!("no mask after address \"{word}\""));
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
            "{}:{number}: address {addr} has bits outside its mask; they are ignored",
            file.display()
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
