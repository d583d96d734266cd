//! The roles a user is a member of, asked of the server for hba's `+role` and `samerole` rules as PostgreSQL's `is_member` decides them: memberships followed through every grant, the user itself included, and none given by being a superuser.

use std::collections::BTreeSet;

use super::exec::Answer;

/// One row: the login name, and the names of the roles it is a member of (directly or not,
/// itself included), each hex-encoded UTF-8, separated by commas (NULL: none, the role does
/// not exist). Every name is qualified, and the lookup's search_path is fixed as well.
pub const QUERY: &str = "WITH RECURSIVE m(oid) AS (\
     SELECT oid FROM pg_catalog.pg_roles WHERE rolname = $1 \
     UNION SELECT a.roleid FROM pg_catalog.pg_auth_members a JOIN m ON a.member = m.oid) \
     SELECT $1::text, pg_catalog.string_agg(pg_catalog.encode(\
     pg_catalog.convert_to(r.rolname::text, 'UTF8'), 'hex'), ',') \
     FROM pg_catalog.pg_roles r JOIN m ON r.oid = m.oid";

/// The roles in the query's answer; `Err` for an answer it cannot give.
pub fn read(answer: &Answer) -> Result<BTreeSet<String>, String> {
    let list = match answer {
        Answer::Row { password, .. } => password.as_deref().unwrap_or(""),
        Answer::NoRow => "",
    };
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|hex| unhex(hex).ok_or_else(|| format!("unreadable role name {hex:?}")))
        .collect()
}

fn unhex(hex: &str) -> Option<String> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = digits
        .chunks(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hex_names_and_refuses_what_it_cannot_read() {
        let row = |p: Option<&str>| Answer::Row {
            name: "bob".into(),
            password: p.map(str::to_string),
        };
        let got = read(&row(Some("626f62,61646d696e73,c3a9"))).unwrap();
        assert_eq!(got.into_iter().collect::<Vec<_>>(), ["admins", "bob", "é"]);
        assert!(read(&row(None)).unwrap().is_empty());
        assert!(read(&Answer::NoRow).unwrap().is_empty());
        assert!(read(&row(Some("6"))).is_err());
        assert!(read(&row(Some("zz"))).is_err());
        assert!(read(&row(Some("ff"))).is_err());
    }
}
