//! Routing requests the parser cannot see: leading comment hints (role, shard, sharding key)
//! and pgcorral's own commands (`SET/SHOW SERVER ROLE`, PgCat's `SET SHARD`, `SET SHARDING
//! KEY`, PgDog's `SET pgdog.shard`, `SET pgdog.sharding_key`, `SHOW SHARD`).

/// Which servers a client wants its queries to go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleChoice {
    Primary,
    Replica,
    Auto,
    Any,
    Default,
}

impl RoleChoice {
    fn from_word(word: &str) -> Option<Self> {
        [
            ("primary", Self::Primary),
            ("replica", Self::Replica),
            ("auto", Self::Auto),
            ("any", Self::Any),
            ("default", Self::Default),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(word))
        .map(|(_, role)| role)
    }
}

/// Where a comment or a `SET` sends a sharded database's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardChoice {
    /// A shard by number (`SET SHARD TO '1'`, `/* shard_id: 1 */`).
    Shard(usize),
    /// A key's value, hashed to its shard (`SET SHARDING KEY TO '1234'`, `/* sharding_key: 1234 */`).
    Key(String),
}

/// The shard named by the comments at the start of the text: `/* shard_id: n */`,
/// `/* sharding_key: v */` (PgCat's), `/* pgdog_shard: n */`, `/* pgdog_sharding_key: v */`
/// (PgDog's); the value may be quoted. The first found wins.
pub fn comment_shard(sql: &str) -> Option<ShardChoice> {
    let mut rest = sql;
    while let Some((body, after)) = leading_comment(rest) {
        if let Some(choice) = shard_in(body) {
            return Some(choice);
        }
        rest = after;
    }
    None
}

fn shard_in(body: &str) -> Option<ShardChoice> {
    let (name, value) = body.trim_ascii().split_once(':')?;
    let value = value.trim_ascii();
    // A quoted value is one, the empty string included (`sharding_key: ''`); nothing at all
    // names nothing.
    if value.is_empty() {
        return None;
    }
    let value = ['\'', '"']
        .iter()
        .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
        .unwrap_or(value);
    match name.trim_ascii().to_ascii_lowercase().as_str() {
        "shard_id" | "pgdog_shard" => value.parse().ok().map(ShardChoice::Shard),
        "sharding_key" | "pgdog_sharding_key" => Some(ShardChoice::Key(value.to_string())),
        _ => None,
    }
}

/// A per-query override found in the comments at the start of the text:
/// `/* pgcorral: role=primary */` or `role=replica` (spaces optional around ':' and '=', any
/// case), or pgpool's `/*NO LOAD BALANCE*/` (primary). Only comments before the first token of
/// SQL count; the first hint found wins.
pub fn comment_hint(sql: &str) -> Option<RoleChoice> {
    let mut rest = sql;
    while let Some((body, after)) = leading_comment(rest) {
        if let Some(role) = hint_in(body) {
            return Some(role);
        }
        rest = after;
    }
    None
}

fn hint_in(body: &str) -> Option<RoleChoice> {
    let mut words = body.split_ascii_whitespace();
    if ["no", "load", "balance"].iter().all(|w| {
        words
            .next()
            .is_some_and(|word| word.eq_ignore_ascii_case(w))
    }) && words.next().is_none()
    {
        return Some(RoleChoice::Primary);
    }
    let rest = strip_word(body.trim_ascii_start(), "pgcorral")?;
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(':')?
        .trim_ascii_start();
    let rest = strip_word(rest, "role")?
        .trim_ascii_start()
        .strip_prefix('=')?;
    match RoleChoice::from_word(rest.trim_ascii())? {
        role @ (RoleChoice::Primary | RoleChoice::Replica) => Some(role),
        _ => None,
    }
}

fn strip_word<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let head = s.get(..word.len())?;
    head.eq_ignore_ascii_case(word).then(|| &s[word.len()..])
}

/// PostgreSQL's whitespace.
fn skip_space(s: &str) -> &str {
    s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
}

/// The body of the comment that starts `sql` (after whitespace) and the text after it. Block
/// comments nest, as in PostgreSQL; an unterminated one is not a comment.
fn leading_comment(sql: &str) -> Option<(&str, &str)> {
    let s = skip_space(sql);
    if let Some(line) = s.strip_prefix("--") {
        let end = line.find(['\n', '\r']).unwrap_or(line.len());
        return Some(line.split_at(end));
    }
    let block = s.strip_prefix("/*")?;
    let bytes = block.as_bytes();
    let (mut depth, mut i) = (1, 0);
    while i + 1 < bytes.len() {
        match &bytes[i..i + 2] {
            b"/*" => (depth, i) = (depth + 1, i + 2),
            b"*/" if depth == 1 => return Some((&block[..i], &block[i + 2..])),
            b"*/" => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
    }
    None
}

/// pgcorral's own commands, recognised when they are the whole query (leading comments,
/// surrounding whitespace and a trailing ';' allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    SetRole(RoleChoice),
    ShowRole,
    /// `SET SHARD TO 'n'` / `SET pgdog.shard TO n`; `None` for `default` (back to routing by
    /// the query).
    SetShard(Option<usize>),
    /// `SET SHARDING KEY TO 'v'` / `SET pgdog.sharding_key TO 'v'`.
    SetShardingKey(String),
    ShowShard,
}

const USAGE: &str =
    "expected SET SERVER ROLE TO primary|replica|auto|any|default, or SHOW SERVER ROLE";

/// What a `SET` or `SHOW` of pgcorral's names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Name {
    Role,
    Shard,
    ShardingKey,
}

/// The name after SET or SHOW: `server role` (also PgCat's README's `sharding role`),
/// `shard`, `sharding key`, `pgdog.shard`, `pgdog.sharding_key`.
fn name(tokens: &mut Tokens) -> Option<Name> {
    let word = |t: Option<Token>| match t {
        Some(Token::Word(w)) => Some(w.to_ascii_lowercase()),
        _ => None,
    };
    let first = word(tokens.next())?;
    match first.as_str() {
        "server" => (word(tokens.next())? == "role").then_some(Name::Role),
        "shard" => Some(Name::Shard),
        "sharding" => match word(tokens.next())?.as_str() {
            "key" => Some(Name::ShardingKey),
            "role" => Some(Name::Role),
            _ => None,
        },
        "pgdog" => {
            if !matches!(tokens.next(), Some(Token::Dot)) {
                return None;
            }
            match word(tokens.next())?.as_str() {
                "shard" => Some(Name::Shard),
                "sharding_key" => Some(Name::ShardingKey),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `SELECT pgcorral.unique_id()` (keywords in any case, spaces anywhere between its tokens, a
/// `;` after it): a unique id pgcorral answers on a sharded database.
pub fn unique_id(sql: &str) -> bool {
    if sql.len() > 96 {
        return false;
    }
    let mut rest = sql;
    while let Some((_, after)) = leading_comment(rest) {
        rest = after;
    }
    let text = skip_space(rest).trim_ascii_end();
    let text = text.strip_suffix(';').unwrap_or(text);
    let Some(call) = text
        .get(..7)
        .filter(|w| w[..6].eq_ignore_ascii_case("select") && w.as_bytes()[6].is_ascii_whitespace())
        .map(|_| &text[7..])
    else {
        return false;
    };
    let call: String = call
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    call == "pgcorral.unique_id()"
}

/// `SET SERVER ROLE TO 'primary'` / `SET SERVER ROLE = replica` (quotes optional; values
/// primary, replica, auto, any, default) and `SHOW SERVER ROLE`, keywords in any case. `Err`
/// (a message for the client) for a text that starts like one of them but is not well formed,
/// such as `SET SERVER ROLE TO 'bogus'`; `Ok(None)` for ordinary SQL.
pub fn command(sql: &str) -> Result<Option<Command>, String> {
    let mut rest = sql;
    while let Some((_, after)) = leading_comment(rest) {
        rest = after;
    }
    let text = skip_space(rest).trim_ascii_end();
    // Most queries are neither: told apart by their first word's first letters, untokenized.
    let starts = |w: &[u8]| {
        text.as_bytes()
            .get(..w.len())
            .is_some_and(|b| b.eq_ignore_ascii_case(w))
    };
    if !starts(b"set") && !starts(b"show") {
        return Ok(None);
    }
    let mut tokens = Tokens(text.strip_suffix(';').unwrap_or(text));
    let set = match tokens.next() {
        Some(Token::Word(w)) if w.eq_ignore_ascii_case("set") => true,
        Some(Token::Word(w)) if w.eq_ignore_ascii_case("show") => false,
        _ => return Ok(None),
    };
    let Some(name) = name(&mut tokens) else {
        return Ok(None);
    };
    let usage = match name {
        Name::Role => USAGE,
        Name::Shard => "expected SET SHARD TO 'n' (a shard number, or default), or SHOW SHARD",
        Name::ShardingKey => "expected SET SHARDING KEY TO 'value'",
    };
    if !set {
        return match (name, tokens.next()) {
            (Name::Role, None) => Ok(Some(Command::ShowRole)),
            (Name::Shard, None) => Ok(Some(Command::ShowShard)),
            // SHOW SHARDING KEY is not a command of PgCat's: PostgreSQL answers it.
            (Name::ShardingKey, None) => Ok(None),
            _ => Err(usage.to_string()),
        };
    }
    let value = match (tokens.next(), tokens.next(), tokens.next()) {
        (Some(Token::Equals), Some(Token::Word(v) | Token::Quoted(v)), None) => v,
        (Some(Token::Word(to)), Some(Token::Word(v) | Token::Quoted(v)), None)
            if to.eq_ignore_ascii_case("to") =>
        {
            v
        }
        _ => return Err(usage.to_string()),
    };
    match name {
        Name::Role => match RoleChoice::from_word(value) {
            Some(role) => Ok(Some(Command::SetRole(role))),
            None => Err(format!(
                "invalid value for SERVER ROLE: \"{value}\"; {USAGE}"
            )),
        },
        Name::Shard if value.eq_ignore_ascii_case("default") => Ok(Some(Command::SetShard(None))),
        Name::Shard => match value.trim_ascii().parse() {
            Ok(n) => Ok(Some(Command::SetShard(Some(n)))),
            Err(_) => Err(format!("invalid value for SHARD: \"{value}\"; {usage}")),
        },
        Name::ShardingKey => Ok(Some(Command::SetShardingKey(value.to_string()))),
    }
}

#[derive(Debug, Clone, Copy)]
enum Token<'a> {
    Word(&'a str),
    Quoted(&'a str),
    Equals,
    Dot,
    Other,
}

/// Words, '…' or "…" strings and '=' of a command's text.
struct Tokens<'a>(&'a str);

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let s = skip_space(self.0);
        let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let (token, len) = match s.chars().next()? {
            c if word_char(c) || (c == '-' && s[1..].starts_with(|c: char| c.is_ascii_digit())) => {
                let n = 1 + s[1..].find(|c| !word_char(c)).unwrap_or(s.len() - 1);
                (Token::Word(&s[..n]), n)
            }
            '=' => (Token::Equals, 1),
            '.' => (Token::Dot, 1),
            q @ ('\'' | '"') => match s[1..].find(q) {
                Some(n) => (Token::Quoted(&s[1..n + 1]), n + 2),
                None => (Token::Other, s.len()),
            },
            c => (Token::Other, c.len_utf8()),
        };
        self.0 = &s[len..];
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgcorral_comment_hints() {
        assert_eq!(
            comment_hint("/* pgcorral: role=primary */ SELECT 1"),
            Some(RoleChoice::Primary)
        );
        assert_eq!(
            comment_hint("/*PGCORRAL:ROLE=REPLICA*/SELECT 1"),
            Some(RoleChoice::Replica)
        );
        assert_eq!(
            comment_hint("  /* pgcorral : role = replica */\nSELECT 1"),
            Some(RoleChoice::Replica)
        );
        assert_eq!(
            comment_hint("-- pgcorral: role=primary\nSELECT 1"),
            Some(RoleChoice::Primary)
        );
        assert_eq!(
            comment_hint("-- app: x\n/* note */ /* pgcorral: role=replica */ SELECT 1"),
            Some(RoleChoice::Replica)
        );
        assert_eq!(
            comment_hint("/* outer /* inner */ still */ /* pgcorral: role=primary */ SELECT"),
            Some(RoleChoice::Primary)
        );
    }

    #[test]
    fn pgpool_hint() {
        assert_eq!(
            comment_hint("/*NO LOAD BALANCE*/ SELECT 1"),
            Some(RoleChoice::Primary)
        );
        assert_eq!(
            comment_hint("/*no  load   balance*/SELECT 1"),
            Some(RoleChoice::Primary)
        );
        assert_eq!(comment_hint("/*NO LOAD BALANCING*/ SELECT 1"), None);
    }

    #[test]
    fn not_hints() {
        assert_eq!(comment_hint("SELECT '/* pgcorral: role=primary */'"), None);
        assert_eq!(comment_hint("SELECT /* pgcorral: role=primary */ 1"), None);
        assert_eq!(comment_hint("SELECT 1 /*NO LOAD BALANCE*/"), None);
        assert_eq!(comment_hint("/* pgcorral: role=auto */ SELECT 1"), None);
        assert_eq!(comment_hint("/* pgcorral: role=primary SELECT 1"), None);
        assert_eq!(comment_hint("/* pgcorralx: role=primary */ SELECT 1"), None);
        assert_eq!(comment_hint(""), None);
    }

    #[test]
    fn set_server_role() {
        let set = |role| Ok(Some(Command::SetRole(role)));
        assert_eq!(
            command("SET SERVER ROLE TO 'replica';"),
            set(RoleChoice::Replica)
        );
        assert_eq!(command("set   server  role='auto'"), set(RoleChoice::Auto));
        assert_eq!(
            command("SET SERVER ROLE = primary"),
            set(RoleChoice::Primary)
        );
        assert_eq!(command("Set Server Role To Any ; "), set(RoleChoice::Any));
        assert_eq!(
            command("/* c */ -- d\n SET\tSERVER\nROLE TO \"default\""),
            set(RoleChoice::Default)
        );
    }

    #[test]
    fn show_server_role() {
        assert_eq!(command("SHOW SERVER ROLE;"), Ok(Some(Command::ShowRole)));
        assert_eq!(command("  show server role  "), Ok(Some(Command::ShowRole)));
    }

    #[test]
    fn bad_server_role_commands() {
        let err = command("SET SERVER ROLE TO 'nope'").unwrap_err();
        assert!(err.contains("nope") && err.contains("primary|replica|auto|any|default"));
        assert!(command("SET SERVER ROLE TO").is_err());
        assert!(command("SET SERVER ROLE TO primary extra").is_err());
        assert!(command("SET SERVER ROLE TO primary; SELECT 1").is_err());
        assert!(command("SHOW SERVER ROLE x").is_err());
    }

    #[test]
    fn shard_commands_of_pgcat_and_pgdog() {
        let shard = |n| Ok(Some(Command::SetShard(Some(n))));
        let key = |k: &str| Ok(Some(Command::SetShardingKey(k.to_string())));
        assert_eq!(command("SET SHARD TO '1';"), shard(1));
        assert_eq!(command("set shard = 2"), shard(2));
        assert_eq!(
            command("SET SHARD TO DEFAULT"),
            Ok(Some(Command::SetShard(None)))
        );
        assert_eq!(command("SET pgdog.shard TO 3"), shard(3));
        assert_eq!(command("SET SHARDING KEY TO '1234'"), key("1234"));
        assert_eq!(command("SET SHARDING KEY TO -5"), key("-5"));
        assert_eq!(command("set pgdog.sharding_key = 'abc'"), key("abc"));
        assert_eq!(
            command("SET SHARDING ROLE TO 'primary'"),
            Ok(Some(Command::SetRole(RoleChoice::Primary)))
        );
        assert_eq!(command("SHOW SHARD"), Ok(Some(Command::ShowShard)));
        assert!(command("SET SHARD TO 'x'").is_err());
        assert!(command("SET SHARD TO").is_err());
        assert_eq!(command("SET pgdog.other TO 1"), Ok(None));
        assert_eq!(command("SET shard_count TO 1"), Ok(None));
        assert_eq!(command("SHOW SHARDING KEY"), Ok(None));
    }

    #[test]
    fn shard_comments() {
        assert_eq!(
            comment_shard("/* shard_id: 2 */ SELECT 1"),
            Some(ShardChoice::Shard(2))
        );
        assert_eq!(
            comment_shard("/* sharding_key: 1234 */ SELECT 1"),
            Some(ShardChoice::Key("1234".into()))
        );
        assert_eq!(
            comment_shard("/*pgdog_shard:1*/SELECT 1"),
            Some(ShardChoice::Shard(1))
        );
        assert_eq!(
            comment_shard("-- x\n/* pgdog_sharding_key: 'a b' */ SELECT 1"),
            Some(ShardChoice::Key("a b".into()))
        );
        assert_eq!(comment_shard("SELECT 1 /* shard_id: 2 */"), None);
        assert_eq!(comment_shard("/* shard_id: x */ SELECT 1"), None);
        // An empty quoted key is a key: the empty string.
        for empty in [
            "/* sharding_key: '' */ SELECT 1",
            "/*pgdog_sharding_key:\"\"*/SELECT 1",
        ] {
            assert_eq!(
                comment_shard(empty),
                Some(ShardChoice::Key(String::new())),
                "{empty}"
            );
        }
        assert_eq!(comment_shard("/* sharding_key: */ SELECT 1"), None);
        assert_eq!(comment_shard("/* shard_id: '' */ SELECT 1"), None);
        assert_eq!(comment_shard("/* note: 1 */ SELECT 1"), None);
    }

    #[test]
    fn ordinary_sql_is_not_a_command() {
        assert_eq!(command("SET search_path TO x"), Ok(None));
        assert_eq!(command("SHOW server_version"), Ok(None));
        assert_eq!(command("SET ROLE alice"), Ok(None));
        assert_eq!(command("SELECT 'SET SERVER ROLE TO primary'"), Ok(None));
        assert_eq!(command(""), Ok(None));
        assert_eq!(command("se"), Ok(None));
        assert_eq!(command("settle"), Ok(None));
        assert_eq!(command("select 1"), Ok(None));
        // The first word is read in any case, after comments and whitespace.
        assert_eq!(
            command("/* x */ \n sEt ShArD tO '1';"),
            Ok(Some(Command::SetShard(Some(1))))
        );
        assert_eq!(command("sHoW shard"), Ok(Some(Command::ShowShard)));
    }

    #[test]
    fn the_unique_id_call_is_recognised_exactly() {
        for yes in [
            "SELECT pgcorral.unique_id()",
            "select  PGCORRAL . unique_id ( ) ;",
            "/* c */ SELECT\npgcorral.unique_id()",
        ] {
            assert!(unique_id(yes), "{yes}");
        }
        for no in [
            "SELECT pgcorral.unique_id(), 1",
            "SELECT pgcorral.unique_id() FROM t",
            "SELECTpgcorral.unique_id()",
            "SELECT unique_id()",
            "SELECT 'pgcorral.unique_id()'",
            "SELECT",
            "",
        ] {
            assert!(!unique_id(no), "{no}");
        }
    }
}
