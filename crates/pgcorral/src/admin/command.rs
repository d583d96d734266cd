//! The admin console's commands, parsed from a query's text (PgBouncer's grammar: a keyword,
//! an optional argument, case-insensitive, an optional trailing semicolon).

use crate::services::Stop;

/// One console command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `SHOW what` (upper-cased).
    Show(String),
    /// `SHOW SHARD FOR 'value' [IN database]`: where a sharding key lives.
    ShowShardFor {
        value: String,
        database: Option<String>,
    },
    Pause(Option<String>),
    Resume(Option<String>),
    Suspend,
    Disable(String),
    Enable(String),
    Reconnect(Option<String>),
    /// `KILL [db]`: without a name, every database but the console's.
    Kill(Option<String>),
    KillClient(String),
    WaitClose(Option<String>),
    Reload,
    /// `SHUTDOWN [WAIT_FOR_SERVERS | WAIT_FOR_CLIENTS]`.
    Shutdown(Stop),
    /// `CLEAR CACHE [table]`: the result cache's answers, all or those of a table.
    ClearCache(Option<String>),
    /// `SET key = value`.
    Set {
        key: String,
        value: String,
    },
}

impl Command {
    /// The command's keyword.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Show(_) | Command::ShowShardFor { .. } => "SHOW",
            Command::Pause(_) => "PAUSE",
            Command::Resume(_) => "RESUME",
            Command::Suspend => "SUSPEND",
            Command::Disable(_) => "DISABLE",
            Command::Enable(_) => "ENABLE",
            Command::Reconnect(_) => "RECONNECT",
            Command::Kill(_) => "KILL",
            Command::KillClient(_) => "KILL_CLIENT",
            Command::WaitClose(_) => "WAIT_CLOSE",
            Command::Reload => "RELOAD",
            Command::Shutdown(_) => "SHUTDOWN",
            Command::Set { .. } => "SET",
            Command::ClearCache(_) => "CLEAR",
        }
    }

    /// Whether a stats user (SHOW only) may run it.
    pub fn read_only(&self) -> bool {
        match self {
            Command::Show(_) | Command::ShowShardFor { .. } => true,
            // A session setting SET ignores (see `show::fake_param`).
            Command::Set { key, .. } => super::show::fake_param(key).is_some(),
            _ => false,
        }
    }
}

/// Parses one command; `Err` says what is wrong, for the client.
pub fn parse(text: &str) -> Result<Command, String> {
    let text = text.trim().trim_end_matches(';').trim();
    let (word, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    let arg = || (!rest.is_empty()).then(|| unquote(rest));
    let need = |what: &str| -> Result<String, String> {
        arg().ok_or_else(|| format!("{what} needs a database name"))
    };
    let none = |cmd: Command| -> Result<Command, String> {
        if rest.is_empty() {
            Ok(cmd)
        } else {
            Err(format!("{} takes no argument", word.to_uppercase()))
        }
    };
    match word.to_ascii_uppercase().as_str() {
        "SHOW" if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
            Ok(Command::Show(rest.to_ascii_uppercase()))
        }
        "SHOW" => {
            shard_for(rest).ok_or_else(|| "SHOW needs one thing to show: see SHOW HELP".into())
        }
        "PAUSE" => Ok(Command::Pause(arg())),
        "RESUME" => Ok(Command::Resume(arg())),
        "SUSPEND" => none(Command::Suspend),
        "DISABLE" => Ok(Command::Disable(need("DISABLE")?)),
        "ENABLE" => Ok(Command::Enable(need("ENABLE")?)),
        "RECONNECT" => Ok(Command::Reconnect(arg())),
        "KILL" => Ok(Command::Kill(arg())),
        "KILL_CLIENT" => Ok(Command::KillClient(
            arg().ok_or("KILL_CLIENT needs a client id")?,
        )),
        "WAIT_CLOSE" => Ok(Command::WaitClose(arg())),
        "RELOAD" => none(Command::Reload),
        "CLEAR" => {
            let mut words = rest.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(c), table, None) if c.eq_ignore_ascii_case("cache") => {
                    Ok(Command::ClearCache(table.map(unquote)))
                }
                _ => Err("CLEAR takes CACHE and a table's name or nothing".into()),
            }
        }
        "SHUTDOWN" => match rest.to_ascii_uppercase().as_str() {
            "" => Ok(Command::Shutdown(Stop::Immediate)),
            "WAIT_FOR_SERVERS" => Ok(Command::Shutdown(Stop::WaitForServers)),
            "WAIT_FOR_CLIENTS" => Ok(Command::Shutdown(Stop::WaitForClients)),
            _ => Err("SHUTDOWN takes WAIT_FOR_SERVERS, WAIT_FOR_CLIENTS or nothing".into()),
        },
        "SET" => {
            let (key, value) = rest
                .split_once('=')
                .or_else(|| rest.split_once(" TO "))
                .or_else(|| rest.split_once(" to "))
                .ok_or("SET needs key = value")?;
            let key = key.trim().to_ascii_lowercase();
            if key.is_empty() {
                return Err("SET needs key = value".into());
            }
            Ok(Command::Set {
                key,
                value: unquote(value.trim()),
            })
        }
        "" => Err("empty command: see SHOW HELP".into()),
        _ => Err(format!("invalid command '{text}', use SHOW HELP;")),
    }
}

/// `SHARD FOR 'value' [IN database]` (after SHOW).
fn shard_for(rest: &str) -> Option<Command> {
    let mut words = rest.splitn(3, char::is_whitespace);
    let (shard, for_, tail) = (words.next()?, words.next()?, words.next()?.trim());
    if !shard.eq_ignore_ascii_case("shard") || !for_.eq_ignore_ascii_case("for") {
        return None;
    }
    // The value, quoted or one word, then optionally IN database.
    let (value, after) = match tail.strip_prefix('\'') {
        Some(q) => {
            let end = q.find('\'')?;
            (q[..end].to_string(), q[end + 1..].trim())
        }
        None => match tail.split_once(char::is_whitespace) {
            Some((v, a)) => (v.to_string(), a.trim()),
            None => (tail.to_string(), ""),
        },
    };
    let database = match after.split_once(char::is_whitespace) {
        Some((kw, db)) if kw.eq_ignore_ascii_case("in") => Some(unquote(db.trim())),
        None if after.is_empty() => None,
        _ => return None,
    };
    Some(Command::ShowShardFor { value, database })
}

/// A name or value as written, without surrounding single or double quotes.
fn unquote(s: &str) -> String {
    for q in ['\'', '"'] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner.replace(&format!("{q}{q}"), &q.to_string());
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands() {
        assert_eq!(parse("show pools;"), Ok(Command::Show("POOLS".into())));
        assert_eq!(
            parse("SHOW SHARD FOR '1234'"),
            Ok(Command::ShowShardFor {
                value: "1234".into(),
                database: None
            })
        );
        assert_eq!(
            parse("show shard for 'a b' in app;"),
            Ok(Command::ShowShardFor {
                value: "a b".into(),
                database: Some("app".into())
            })
        );
        assert!(parse("SHOW SHARD FOR").is_err());
        assert_eq!(
            parse("  SHOW  stats_totals "),
            Ok(Command::Show("STATS_TOTALS".into()))
        );
        assert_eq!(parse("PAUSE"), Ok(Command::Pause(None)));
        assert_eq!(parse("pause app"), Ok(Command::Pause(Some("app".into()))));
        assert_eq!(
            parse("resume \"My Db\""),
            Ok(Command::Resume(Some("My Db".into())))
        );
        assert_eq!(parse("KILL"), Ok(Command::Kill(None)));
        assert_eq!(parse("kill app"), Ok(Command::Kill(Some("app".into()))));
        assert_eq!(
            parse("kill_client 42"),
            Ok(Command::KillClient("42".into()))
        );
        assert_eq!(
            parse("SET default_pool_size = 30"),
            Ok(Command::Set {
                key: "default_pool_size".into(),
                value: "30".into()
            })
        );
        assert_eq!(
            parse("set pool_mode='session'"),
            Ok(Command::Set {
                key: "pool_mode".into(),
                value: "session".into()
            })
        );
        assert!(parse("DISABLE").is_err());
        assert!(parse("SHOW").is_err());
        assert!(parse("SHOW a b").is_err());
        assert!(parse("SUSPEND now").is_err());
        assert_eq!(parse("shutdown;"), Ok(Command::Shutdown(Stop::Immediate)));
        assert_eq!(
            parse("shutdown wait_for_clients"),
            Ok(Command::Shutdown(Stop::WaitForClients))
        );
        assert_eq!(
            parse("SHUTDOWN WAIT_FOR_SERVERS"),
            Ok(Command::Shutdown(Stop::WaitForServers))
        );
        assert!(parse("SHUTDOWN later").is_err());
        assert!(parse("SELECT 1").unwrap_err().contains("invalid command"));
        assert!(!parse("PAUSE").unwrap().read_only());
        assert!(parse("SHOW x").unwrap().read_only());
    }
}
