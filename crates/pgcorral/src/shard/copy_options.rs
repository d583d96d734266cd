//! Reading a `COPY ... FROM STDIN` statement's options into the splitter's [`Options`], with
//! PostgreSQL's checks and wording.

use pg_query::{Node, NodeEnum};

use super::{Columns, Format, Options};

impl Options {
    /// From a CopyStmt's WITH options as pg_query gives them (`CopyStmt.options`: DefElem
    /// nodes, the old syntax's `CSV`, `BINARY`, `HEADER`... included). Err(message) for what
    /// PostgreSQL would refuse (in its wording) and for what pgcorral cannot split.
    pub fn from_copy_options(options: &[Node]) -> Result<Options, String> {
        let mut seen: Vec<&str> = Vec::new();
        let mut format = Format::Text;
        let (mut delimiter, mut quote, mut escape, mut null, mut default) =
            (None, None, None, None, None);
        let mut header = false;
        let (mut force_not_null, mut force_null) = (Columns::None, Columns::None);
        for node in options {
            let Some(NodeEnum::DefElem(d)) = node.node.as_ref() else {
                return Err("COPY option is not a name and value".into());
            };
            let name = d.defname.as_str();
            if seen.contains(&name) {
                return Err("conflicting or redundant options".into());
            }
            seen.push(name);
            let arg = d.arg.as_deref().and_then(|n| n.node.as_ref());
            match name {
                "format" => {
                    format = match string(name, arg)?.as_str() {
                        "text" => Format::Text,
                        "csv" => Format::Csv,
                        "binary" => Format::Binary,
                        f => return Err(format!("COPY format \"{f}\" not recognized")),
                    }
                }
                "delimiter" => delimiter = Some(string(name, arg)?),
                "null" => null = Some(string(name, arg)?),
                "default" => default = Some(string(name, arg)?),
                "quote" => quote = Some(string(name, arg)?),
                "escape" => escape = Some(string(name, arg)?),
                "header" => header = header_option(arg)?,
                "force_not_null" => force_not_null = columns(name, arg)?,
                "force_null" => force_null = columns(name, arg)?,
                "force_quote" => {
                    return Err("COPY FORCE_QUOTE cannot be used with COPY FROM".into())
                }
                "encoding" => {
                    let e = string(name, arg)?;
                    if !is_ascii_safe_encoding(&e) {
                        return Err(format!("pgcorral cannot split COPY data in encoding \"{e}\": its characters may hold ASCII bytes"));
                    }
                }
                // The shards check these; they do not change where a row ends or goes.
                "freeze" | "on_error" | "log_verbosity" | "reject_limit" => {}
                other => return Err(format!("option \"{other}\" not recognized")),
            }
        }
        let csv = format == Format::Csv;
        let mut o = Options::new(format);
        if format == Format::Binary {
            for (given, what) in [
                (delimiter.is_some(), "DELIMITER"),
                (null.is_some(), "NULL"),
                (default.is_some(), "DEFAULT"),
                (header, "HEADER"),
            ] {
                if given {
                    return Err(format!("cannot specify {what} in BINARY mode"));
                }
            }
        }
        for (given, what) in [
            (quote.is_some(), "QUOTE"),
            (escape.is_some(), "ESCAPE"),
            (force_not_null != Columns::None, "FORCE_NOT_NULL"),
            (force_null != Columns::None, "FORCE_NULL"),
        ] {
            if given && !csv {
                return Err(format!("COPY {what} requires CSV mode"));
            }
        }
        if let Some(d) = delimiter {
            o.delimiter = one_byte(&d, "delimiter")?;
        }
        if let Some(q) = quote {
            o.quote = one_byte(&q, "quote")?;
        }
        o.escape = match escape {
            Some(e) => one_byte(&e, "escape")?,
            None => o.quote,
        };
        if let Some(n) = null {
            o.null = n.into_bytes();
        }
        o.default = default.map(String::into_bytes);
        o.header = header;
        o.force_not_null = force_not_null;
        o.force_null = force_null;
        o.check()?;
        Ok(o)
    }

    /// PostgreSQL's checks of the options together, and what the splitter needs.
    fn check(&self) -> Result<(), String> {
        if self.format == Format::Binary {
            return Ok(());
        }
        let newline = |b: &u8| *b == b'\n' || *b == b'\r';
        let (delim, quote, csv) = (self.delimiter, self.quote, self.format == Format::Csv);
        if !csv && b"\\.abcdefghijklmnopqrstuvwxyz0123456789".contains(&delim) {
            return Err(format!("COPY delimiter cannot be \"{}\"", delim as char));
        }
        let default = self.default.as_deref();
        let checks = [
            (newline(&delim), "COPY delimiter cannot be newline or carriage return"),
            (
                self.null.iter().any(newline),
                "COPY null representation cannot use newline or carriage return",
            ),
            (
                default.is_some_and(|d| d.iter().any(newline)),
                "COPY default representation cannot use newline or carriage return",
            ),
            (
                self.null.contains(&delim),
                "COPY delimiter character must not appear in the NULL specification",
            ),
            (
                default.is_some_and(|d| d.contains(&delim)),
                "COPY delimiter character must not appear in the DEFAULT specification",
            ),
            (
                default == Some(&self.null[..]),
                "NULL specification and DEFAULT specification cannot be the same",
            ),
            (csv && delim == quote, "COPY delimiter and quote must be different"),
            (
                csv && self.null.contains(&quote),
                "CSV quote character must not appear in the NULL specification",
            ),
            (
                csv && default.is_some_and(|d| d.contains(&quote)),
                "CSV quote character must not appear in the DEFAULT specification",
            ),
            (
                csv && (newline(&quote) || newline(&self.escape)),
                "pgcorral cannot split CSV data whose quote or escape is a newline or carriage return",
            ),
        ];
        match checks.iter().find(|(bad, _)| *bad) {
            Some((_, why)) => Err((*why).to_string()),
            None => Ok(()),
        }
    }
}

/// The encodings whose multi-byte characters may hold ASCII bytes (PostgreSQL's client-only
/// encodings and their aliases), written as PostgreSQL compares names: lower case, letters
/// and digits only.
const NOT_ASCII_SAFE: &str = "sjis shiftjis mskanji cp932 win932 windows932 shiftjis2004 big5 \
    cp950 win950 windows950 gbk cp936 win936 windows936 uhc cp949 win949 windows949 gb18030 johab";

/// Whether COPY data in this encoding (a `client_encoding` or COPY's `ENCODING`) can be split
/// byte by byte: false for the encodings whose multi-byte characters may hold ASCII bytes (a
/// backslash, a delimiter, a quote).
pub fn is_ascii_safe_encoding(name: &str) -> bool {
    let clean: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    !NOT_ASCII_SAFE.split_ascii_whitespace().any(|e| e == clean)
}

/// An option's value as a string (`defGetString`).
fn string(name: &str, arg: Option<&NodeEnum>) -> Result<String, String> {
    match arg {
        Some(NodeEnum::String(s)) => Ok(s.sval.clone()),
        Some(NodeEnum::Integer(i)) => Ok(i.ival.to_string()),
        Some(NodeEnum::Float(f)) => Ok(f.fval.clone()),
        Some(NodeEnum::Boolean(b)) => Ok(b.boolval.to_string()),
        _ => Err(format!("{name} requires a parameter")),
    }
}

/// `HEADER`: a Boolean or `match`.
fn header_option(arg: Option<&NodeEnum>) -> Result<bool, String> {
    let bad = || Err("header requires a Boolean value, or \"match\"".to_string());
    match arg {
        None => Ok(true),
        Some(NodeEnum::Boolean(b)) => Ok(b.boolval),
        Some(NodeEnum::Integer(i)) => match i.ival {
            0 => Ok(false),
            1 => Ok(true),
            _ => bad(),
        },
        Some(NodeEnum::String(s)) => match s.sval.to_ascii_lowercase().as_str() {
            "true" | "on" | "match" => Ok(true),
            "false" | "off" => Ok(false),
            _ => bad(),
        },
        _ => bad(),
    }
}

/// A `FORCE_*` option's columns: a list of names or `*`.
fn columns(name: &str, arg: Option<&NodeEnum>) -> Result<Columns, String> {
    let bad = || format!("argument to option \"{name}\" must be a list of column names");
    match arg {
        Some(NodeEnum::AStar(_)) => Ok(Columns::All),
        Some(NodeEnum::List(l)) => l
            .items
            .iter()
            .map(|n| match n.node.as_ref() {
                Some(NodeEnum::String(s)) => Ok(s.sval.clone()),
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()
            .map(Columns::Named),
        _ => Err(bad()),
    }
}

fn one_byte(s: &str, what: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [b] => Ok(*b),
        _ => Err(format!("COPY {what} must be a single one-byte character")),
    }
}
