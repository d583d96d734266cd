//! The lexer against PostgreSQL's own scanner (libpg_query's, through `pg_query`): for a text
//! PostgreSQL parses, the identifiers, literals and the punctuation the classifier reads lie
//! where PostgreSQL's scanner puts them, and each identifier's [`catalog_name`] is the name
//! PostgreSQL makes of it. For the unit tests here and the `session_lex_oracle` fuzz target.

use std::ops::Range;

use pg_query::protobuf::{KeywordKind, ScanToken, Token as Pg};
use pg_query::{NodeEnum, ParserOptions};

use super::{catalog_name, Lexer, Token};

/// What is compared, by kind and place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// A keyword or identifier, unquoted or quoted.
    Ident,
    /// A `U&"..."` identifier, with its `UESCAPE` clause.
    UIdent,
    /// A string literal (plain, E, dollar-quoted).
    Str,
    /// A `U&'...'` string, with its `UESCAPE` clause.
    UStr,
    /// `B'...'`, `X'...'`.
    Bits,
    Open,
    Close,
    Comma,
    Dot,
    Cast,
    Semicolon,
}

/// Items in the order of the text, each with where it lies.
type Items = Vec<(Item, Range<usize>)>;

/// `Ok` unless `sql` is a text PostgreSQL parses on which the lexer and PostgreSQL's scanner
/// disagree; the `Err` says where.
pub(crate) fn check(sql: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(sql) else {
        return Ok(());
    };
    // PostgreSQL reads a text up to a NUL; pg_query takes none.
    if text.contains('\0') || pg_query::parse(text, ParserOptions::DEFAULT).is_err() {
        return Ok(());
    }
    let Some(theirs) = postgres_items(text)? else {
        return Ok(());
    };
    let mut ours = Vec::new();
    let mut lex = Lexer::new(sql, false);
    while let Some(tok) = lex.next() {
        if let Some(item) = item(&tok) {
            ours.push((item, lex.span(), tok));
        }
    }
    let pairs = ours.iter().map(|(i, r, _)| (*i, r.clone()));
    if !pairs.clone().eq(theirs.iter().cloned()) {
        let ours: Vec<_> = pairs.map(|(i, r)| (i, &text[r])).collect();
        let theirs: Vec<_> = theirs.iter().map(|(i, r)| (*i, &text[r.clone()])).collect();
        return Err(format!(
            "{text:?}: the lexer reads\n{ours:?}\nPostgreSQL's scanner reads\n{theirs:?}"
        ));
    }
    for (item, span, tok) in &ours {
        if !matches!(item, Item::Ident | Item::UIdent) {
            continue;
        }
        let written = &text[span.clone()];
        let want = postgres_name(written)?;
        let got = catalog_name(tok).map(|n| String::from_utf8_lossy(&n).into_owned());
        if got.as_deref() != Some(want.as_str()) {
            return Err(format!(
                "{text:?}: {written:?} names {got:?} for the lexer, {want:?} for PostgreSQL"
            ));
        }
    }
    Ok(())
}

fn item(tok: &Token<'_>) -> Option<Item> {
    Some(match tok {
        Token::Word(_) | Token::Quoted(_) => Item::Ident,
        Token::UQuoted { .. } => Item::UIdent,
        Token::Str(_) => Item::Str,
        Token::UStr { .. } => Item::UStr,
        Token::Bits(_) => Item::Bits,
        Token::Open => Item::Open,
        Token::Close => Item::Close,
        Token::Comma => Item::Comma,
        Token::Dot => Item::Dot,
        Token::Cast => Item::Cast,
        Token::Semicolon => Item::Semicolon,
        Token::Other => return None,
    })
}

/// The items of PostgreSQL's scan of `text` (comments dropped; a `U&` token's `UESCAPE`
/// and its string joined to it, as the grammar's lexer joins them). `None` for a text that
/// PostgreSQL rejects though libpg_query does not: libpg_query's scanner lacks scan.l's
/// `param_junk` rule, so it reads `$1abc` as `$1 abc` (an alias) where PostgreSQL 15+
/// reports trailing junk.
fn postgres_items(text: &str) -> Result<Option<Items>, String> {
    let tokens = pg_query::scan(text).map_err(|e| format!("{text:?}: pg_query::scan: {e}"))?;
    let tokens: Vec<&ScanToken> = tokens
        .tokens
        .iter()
        .filter(|t| !matches!(t.token(), Pg::SqlComment | Pg::CComment))
        .collect();
    let junk = tokens.windows(2).any(|w| {
        w[0].token() == Pg::Param
            && w[1].start == w[0].end
            && (w[1].token() == Pg::Ident || w[1].keyword_kind() != KeywordKind::NoKeyword)
    });
    if junk {
        return Ok(None);
    }
    let mut items = Vec::new();
    let mut k = 0;
    while k < tokens.len() {
        let t = tokens[k];
        let span = t.start as usize..t.end as usize;
        k += 1;
        let item = match t.token() {
            Pg::Uident | Pg::Usconst => {
                let mut span = span;
                if let [u, s, ..] = tokens[k..] {
                    if u.token() == Pg::Uescape && s.token() == Pg::Sconst {
                        span.end = s.end as usize;
                        k += 2;
                    }
                }
                let item = match t.token() {
                    Pg::Uident => Item::UIdent,
                    _ => Item::UStr,
                };
                items.push((item, span));
                continue;
            }
            Pg::Ident => Item::Ident,
            _ if t.keyword_kind() != KeywordKind::NoKeyword => Item::Ident,
            Pg::Sconst => Item::Str,
            Pg::Bconst | Pg::Xconst => Item::Bits,
            Pg::Ascii40 => Item::Open,
            Pg::Ascii41 => Item::Close,
            Pg::Ascii44 => Item::Comma,
            Pg::Ascii46 => Item::Dot,
            Pg::Typecast => Item::Cast,
            Pg::Ascii59 => Item::Semicolon,
            _ => continue,
        };
        items.push((item, span));
    }
    Ok(Some(items))
}

/// The name PostgreSQL makes of an identifier written `written`: the column name of
/// `SELECT 1 AS written` (every keyword may stand there).
fn postgres_name(written: &str) -> Result<String, String> {
    let sql = format!("select 1 as {written}");
    let parsed = pg_query::parse(&sql, ParserOptions::DEFAULT)
        .map_err(|e| format!("{sql:?} does not parse: {e}"))?;
    let name = parsed.protobuf.stmts.first().and_then(|raw| {
        let Some(NodeEnum::SelectStmt(s)) = raw.stmt.as_ref()?.node.as_ref() else {
            return None;
        };
        match s.target_list.first()?.node.as_ref()? {
            NodeEnum::ResTarget(t) => Some(t.name.clone()),
            _ => None,
        }
    });
    name.ok_or_else(|| format!("{sql:?}: no column name"))
}

#[cfg(test)]
mod tests;
