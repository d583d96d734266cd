//! A multi-row `INSERT ... VALUES` split to its rows' shards (sans-IO): one statement per shard
//! with that shard's rows (PostgreSQL's parser writes it back as SQL), its parameters numbered
//! again from `$1`, and the Parse and Bind bodies that carry that shard's parameters.

use pg_query::protobuf::{ParseResult, Token};
use pg_query::{Node, NodeEnum};
use pgwire::frontend::BindBody;

/// One shard's part of the INSERT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub shard: usize,
    pub sql: String,
    /// The INSERT's parameters this part uses (0-based), in the order of its `$1`, `$2`, ...
    pub params: Vec<usize>,
}

/// The INSERT of `text` as one INSERT per shard (`rows`: each row's shard, in order), in the
/// order shards first appear; `escapes`: the client's standard_conforming_strings is off.
pub fn split(text: &str, rows: &[usize], escapes: bool) -> Result<Vec<Part>, String> {
    let parsed = pg_query::parse(text, super::plan::parser_options(escapes))
        .map_err(|e| e.to_string())?
        .protobuf;
    let all = values(&parsed).ok_or("not an INSERT ... VALUES")?;
    if all.len() != rows.len() {
        return Err("the INSERT's rows could not be matched to their shards".into());
    }
    let mut shards: Vec<usize> = Vec::new();
    for &s in rows {
        if !shards.contains(&s) {
            shards.push(s);
        }
    }
    shards
        .into_iter()
        .map(|shard| {
            let mut p = parsed.clone();
            let kept: Vec<Node> = all
                .iter()
                .zip(rows)
                .filter(|(_, &s)| s == shard)
                .map(|(row, _)| row.clone())
                .collect();
            set_values(&mut p, kept);
            let sql = pg_query::deparse(&p, Default::default()).map_err(|e| e.to_string())?;
            let (sql, params) = renumber(&sql)?;
            Ok(Part { shard, sql, params })
        })
        .collect()
}

fn values(p: &ParseResult) -> Option<Vec<Node>> {
    let NodeEnum::InsertStmt(i) = p.stmts.first()?.stmt.as_ref()?.node.as_ref()? else {
        return None;
    };
    let NodeEnum::SelectStmt(s) = i.select_stmt.as_ref()?.node.as_ref()? else {
        return None;
    };
    Some(s.values_lists.clone())
}

fn set_values(p: &mut ParseResult, rows: Vec<Node>) {
    let Some(NodeEnum::InsertStmt(i)) = p
        .stmts
        .first_mut()
        .and_then(|r| r.stmt.as_mut())
        .and_then(|n| n.node.as_mut())
    else {
        return;
    };
    if let Some(NodeEnum::SelectStmt(s)) = i.select_stmt.as_mut().and_then(|n| n.node.as_mut()) {
        s.values_lists = rows;
    }
}

/// `sql` with its parameters numbered from `$1` in the order of their old numbers, and the
/// old parameters (0-based) in their new order. PostgreSQL's own scanner finds them (not in
/// strings, comments or identifiers).
fn renumber(sql: &str) -> Result<(String, Vec<usize>), String> {
    let scanned = pg_query::scan(sql).map_err(|e| e.to_string())?;
    let mut found: Vec<(usize, usize, usize)> = Vec::new();
    for t in &scanned.tokens {
        if t.token != Token::Param as i32 {
            continue;
        }
        let (start, end) = (t.start as usize, t.end as usize);
        let n: usize = sql
            .get(start + 1..end)
            .and_then(|d| d.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or("a parameter number could not be read")?;
        found.push((start, end, n - 1));
    }
    let mut params: Vec<usize> = found.iter().map(|f| f.2).collect();
    params.sort_unstable();
    params.dedup();
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end, old) in found {
        out.push_str(&sql[at..start]);
        let new = params.binary_search(&old).expect("collected above") + 1;
        out.push('$');
        out.push_str(&new.to_string());
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok((out, params))
}

/// A Parse body after its name (`text\0`, count, types) for `sql`, with the parameter types
/// of `original` (a Parse body after its name) that `params` name; a type the original left
/// unspecified stays so.
pub fn parse_rest(original: &[u8], sql: &str, params: &[usize]) -> Option<Vec<u8>> {
    let end = original.iter().position(|&b| b == 0)?;
    let rest = &original[end + 1..];
    let n = u16::from_be_bytes([*rest.first()?, *rest.get(1)?]) as usize;
    let types = rest.get(2..2 + 4 * n)?;
    let mut out = Vec::with_capacity(sql.len() + 3 + 4 * params.len());
    out.extend_from_slice(sql.as_bytes());
    out.push(0);
    out.extend_from_slice(&u16::try_from(params.len()).ok()?.to_be_bytes());
    for &p in params {
        out.extend_from_slice(types.get(4 * p..4 * p + 4).unwrap_or(&[0; 4]));
    }
    Some(out)
}

/// A Bind body of the unnamed portal and statement carrying the parameters of `bind` that
/// `params` names, in that order, with their formats (`None`: one of them is not in it).
pub fn subset(bind: &BindBody, params: &[usize]) -> Option<Vec<u8>> {
    let (values, results) = bind.values_and_results()?;
    let formats: Vec<u16> = match bind.format_count() {
        // None, or one for every parameter: kept as sent.
        n @ (0 | 1) => (0..n).filter_map(|i| bind.format_code(i)).collect(),
        _ => params
            .iter()
            .map(|&p| bind.format_code(p))
            .collect::<Option<_>>()?,
    };
    let mut out = vec![0, 0];
    out.extend_from_slice(&u16::try_from(formats.len()).ok()?.to_be_bytes());
    for f in formats {
        out.extend_from_slice(&f.to_be_bytes());
    }
    out.extend_from_slice(&u16::try_from(params.len()).ok()?.to_be_bytes());
    for &p in params {
        match values.get(p)? {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&i32::try_from(v.len()).ok()?.to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    out.extend_from_slice(results);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_insert_per_shard_with_its_rows() {
        let sql = "INSERT INTO t (k, v) VALUES (1, 'a'), (2, 'b'), (3, 'c') RETURNING k";
        let got = split(sql, &[1, 0, 1], false).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].shard, 1);
        assert!(got[0].sql.contains("(1, 'a'), (3, 'c')"), "{}", got[0].sql);
        assert!(got[0].sql.contains("RETURNING k"), "{}", got[0].sql);
        assert_eq!(got[1].shard, 0);
        assert!(
            got[1].sql.contains("(2, 'b')") && !got[1].sql.contains("'a'"),
            "{}",
            got[1].sql
        );
        assert!(split(sql, &[0, 1], false).is_err());
    }

    #[test]
    fn each_part_numbers_its_own_parameters_from_one() {
        let sql = "INSERT INTO t (k, v) VALUES ($1, $2), ($3, '$4'), ($5, $6) \
                   ON CONFLICT (k) DO UPDATE SET v = $7 RETURNING k";
        let got = split(sql, &[0, 1, 0], false).unwrap();
        assert_eq!(got[0].params, vec![0, 1, 4, 5, 6]);
        assert!(
            got[0].sql.contains("($1, $2), ($3, $4)") && got[0].sql.contains("v = $5"),
            "{}",
            got[0].sql
        );
        assert_eq!(got[1].params, vec![2, 6]);
        assert!(
            got[1].sql.contains("($1, '$4')") && got[1].sql.contains("v = $2"),
            "{}",
            got[1].sql
        );
    }

    #[test]
    fn a_parts_parse_and_bind_carry_its_parameters() {
        // Parse: "x\0", 3 types (int8, unspecified, text).
        let mut parse = b"x\0".to_vec();
        parse.extend_from_slice(&3u16.to_be_bytes());
        for oid in [20u32, 0, 25] {
            parse.extend_from_slice(&oid.to_be_bytes());
        }
        let rest = parse_rest(&parse, "y", &[2, 0]).unwrap();
        let mut want = b"y\0".to_vec();
        want.extend_from_slice(&2u16.to_be_bytes());
        want.extend_from_slice(&25u32.to_be_bytes());
        want.extend_from_slice(&20u32.to_be_bytes());
        assert_eq!(rest, want);
        // A parameter past the declared types is unspecified.
        assert!(parse_rest(&parse, "y", &[5])
            .unwrap()
            .ends_with(&[0, 1, 0, 0, 0, 0]));

        // Bind: portal "p", statement "s", formats (0, 1, 1), values ("a", NULL, "ccc"),
        // one result format 1.
        let mut bind = b"p\0s\0".to_vec();
        bind.extend_from_slice(&3u16.to_be_bytes());
        for f in [0u16, 1, 1] {
            bind.extend_from_slice(&f.to_be_bytes());
        }
        bind.extend_from_slice(&3u16.to_be_bytes());
        bind.extend_from_slice(&1i32.to_be_bytes());
        bind.extend_from_slice(b"a");
        bind.extend_from_slice(&(-1i32).to_be_bytes());
        bind.extend_from_slice(&3i32.to_be_bytes());
        bind.extend_from_slice(b"ccc");
        bind.extend_from_slice(&[0, 1, 0, 1]);
        let b = BindBody::parse(&bind).unwrap();
        let mut want = vec![0, 0];
        want.extend_from_slice(&2u16.to_be_bytes());
        want.extend_from_slice(&[0, 1, 0, 0]);
        want.extend_from_slice(&2u16.to_be_bytes());
        want.extend_from_slice(&3i32.to_be_bytes());
        want.extend_from_slice(b"ccc");
        want.extend_from_slice(&1i32.to_be_bytes());
        want.extend_from_slice(b"a");
        want.extend_from_slice(&[0, 1, 0, 1]);
        assert_eq!(subset(&b, &[2, 0]).unwrap(), want);
        assert!(subset(&b, &[3]).is_none());
        let cut = BindBody::parse(&bind[..bind.len() - 5]).unwrap();
        assert!(subset(&cut, &[0]).is_none());
    }
}
