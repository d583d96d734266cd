//! The ident map file (`auth_ident_file`, PostgreSQL's pg_ident.conf as PgBouncer reads it):
//! lines `MAPNAME SYSTEM-USERNAME PG-USERNAME`, the last may be `all`; no regular expressions,
//! `+group` or includes. A bad line is skipped with a warning naming the file and line.

use super::token::{tokens, Cursor, Token};

/// One line of a map.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    map: String,
    system: String,
    /// `None`: `all`.
    pg: Option<String>,
}

/// The maps of an ident file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ident {
    mappings: Vec<Mapping>,
}

impl Ident {
    /// Parses `text` (from `file`, named in the warnings); the second value is the warnings.
    pub fn parse(file: &str, text: &str) -> (Ident, Vec<String>) {
        let mut ident = Ident::default();
        let mut warnings = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match parse_line(line) {
                Ok(Some(m)) => ident.mappings.push(m),
                Ok(None) => {}
                Err(why) => warnings.push(format!(
                    "{file}:{}: could not parse ident config line {} ({why}); the line is skipped",
                    n + 1,
                    n + 1
                )),
            }
        }
        (ident, warnings)
    }

    /// Whether a map called `map` exists.
    pub fn has_map(&self, map: &str) -> bool {
        self.mappings.iter().any(|m| m.map == map)
    }

    /// Whether map `map` lets the system user `system` log in as `user`.
    pub fn allows(&self, map: &str, system: &str, user: &str) -> bool {
        self.mappings.iter().any(|m| {
            m.map == map && m.system == system && m.pg.as_deref().is_none_or(|pg| pg == user)
        })
    }
}

fn parse_line(line: &str) -> Result<Option<Mapping>, &'static str> {
    let mut t = Cursor::new(tokens(line)?);
    if t.at_end() {
        return Ok(None);
    }
    let Token::Word(map) = t.next() else {
        return Err("a map name must come first");
    };
    let system = match t.next() {
        Token::Word(s) | Token::Quoted(s) => s,
        _ => return Err("no system user name"),
    };
    let pg = match t.next() {
        Token::Word(s) if s == "all" => None,
        Token::Word(s) | Token::Quoted(s) => Some(s),
        _ => return Err("no database user name"),
    };
    if !t.at_end() {
        return Err("unsupported parameters");
    }
    Ok(Some(Mapping { map, system, pg }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps in the shape of PgBouncer's test/pgident.conf, and lines it would skip.
    const IDENT: &str = "# map   system user     database user\n\
        test    bouncer.example.org  someuser\n\
        test    bouncer.example.org  anotheruser\n\
        test2   \"bouncer\"          all\n\
        test2   bouncer.example.org  \"anotheruser\"\n\
        \n\
        broken  onlyone\n\
        extra   a  b  c\n\
        /regex  a  b\n";

    #[test]
    fn maps_system_users_to_database_users() {
        let (ident, warnings) = Ident::parse("pg_ident.conf", IDENT);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("pg_ident.conf:7: could not parse ident config line 7"));
        assert!(warnings[1].starts_with("pg_ident.conf:8: "));
        assert!(ident.has_map("test") && ident.has_map("test2") && !ident.has_map("broken"));
        assert!(ident.allows("test", "bouncer.example.org", "someuser"));
        assert!(ident.allows("test", "bouncer.example.org", "anotheruser"));
        assert!(!ident.allows("test", "bouncer.example.org", "root"));
        assert!(!ident.allows("test", "bouncer", "someuser"));
        assert!(ident.allows("test2", "bouncer", "anyone"));
        assert!(ident.allows("test2", "bouncer.example.org", "anotheruser"));
        assert!(!ident.allows("test2", "bouncer.example.org", "someuser"));
        // PgBouncer has no regular expressions: `/regex` is a plain (odd) map name.
        assert!(ident.allows("/regex", "a", "b"));
    }
}
