//! Which tenant a login names, as Supavisor's clients name it: `options=-c reference=ID`, a
//! user name `NAME.ID` (the part after the last dot), or the TLS server name (SNI).

use crate::session::startup::options;

/// How a login names its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// By external id (the user name's suffix, or `reference` in `options`).
    Id(String),
    /// By the TLS server name: the tenant whose `sni_hostname` it is, else the one its first
    /// label names. One that names no tenant leaves the login to the file's databases.
    Sni(String),
}

/// A login that names a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The user the client names within the tenant (a tenant user's alias).
    pub alias: String,
    pub by: Naming,
    /// When the tenant was named in `options`: what `options` holds without it (`None`: the
    /// parameter is left out), for the server.
    pub options: Option<Option<String>>,
}

/// The tenant `user` (the startup packet's), `options` (its `options` parameter) and `sni`
/// (the TLS server name) name, if any. `file_user`: the configuration file knows `user` by
/// its whole name, which then names no tenant (a file's user may have a dot in its name).
pub fn named(user: &str, opts: Option<&str>, sni: Option<&str>, file_user: bool) -> Option<Named> {
    if let Some((id, rest)) = opts.and_then(reference) {
        return Some(Named {
            alias: user.to_string(),
            by: Naming::Id(id),
            options: Some(rest),
        });
    }
    if !file_user {
        if let Some((alias, id)) = user.rsplit_once('.') {
            if !alias.is_empty() && !id.is_empty() {
                return Some(Named {
                    alias: alias.to_string(),
                    by: Naming::Id(id.to_string()),
                    options: None,
                });
            }
        }
    }
    let host = sni.filter(|h| !h.is_empty())?;
    Some(Named {
        alias: user.to_string(),
        by: Naming::Sni(host.to_ascii_lowercase()),
        options: None,
    })
}

/// The external id a host name's first label names (`acme` of `acme.db.example.com`).
pub fn first_label(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// `reference` in `options` (`-c reference=ID` or `--reference=ID`), and `options` written
/// again without it (`None` when nothing else is left). `None` when it has none, or when
/// `options` does not parse (the login refuses it later, as for any client).
fn reference(opts: &str) -> Option<(String, Option<String>)> {
    let settings = options(opts).ok()?;
    let id = settings
        .iter()
        .rev()
        .find(|(n, _)| n == "reference")
        .map(|(_, v)| v.clone())?;
    let rest: Vec<String> = settings
        .iter()
        .filter(|(n, _)| n != "reference")
        .map(|(n, v)| format!("-c {}={}", escape(n), escape(v)))
        .collect();
    Some((id, (!rest.is_empty()).then(|| rest.join(" "))))
}

/// A word of `options` as PostgreSQL splits them: whitespace and backslashes escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\\' || c.is_whitespace() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(user: &str, opts: Option<&str>, sni: Option<&str>) -> Option<(String, Naming)> {
        named(user, opts, sni, false).map(|n| (n.alias, n.by))
    }

    #[test]
    fn the_suffix_after_the_last_dot_names_the_tenant() {
        let got = id("app.user.acme", None, None);
        assert_eq!(got, Some(("app.user".into(), Naming::Id("acme".into()))));
        assert_eq!(id("alice", None, None), None);
        assert_eq!(id("alice.", None, None), None);
        assert_eq!(id(".acme", None, None), None);
    }

    #[test]
    fn a_user_of_the_file_names_no_tenant_by_its_dot() {
        assert_eq!(named("svc.reports", None, None, true), None);
    }

    #[test]
    fn options_reference_wins_and_leaves_the_rest() {
        let n = named(
            "alice",
            Some("-c reference=acme -c search_path=a\\ b"),
            None,
            false,
        )
        .unwrap();
        assert_eq!(n.by, Naming::Id("acme".into()));
        assert_eq!(n.alias, "alice");
        assert_eq!(n.options, Some(Some("-c search_path=a\\ b".into())));
        let n = named("alice.other", Some("--reference=acme"), None, false).unwrap();
        assert_eq!(n.by, Naming::Id("acme".into()));
        assert_eq!(n.options, Some(None));
    }

    #[test]
    fn sni_names_a_tenant_last() {
        let got = id("alice", None, Some("Acme.DB.example.com"));
        assert_eq!(
            got,
            Some(("alice".into(), Naming::Sni("acme.db.example.com".into())))
        );
        assert_eq!(first_label("acme.db.example.com"), "acme");
        let got = id("alice.beta", None, Some("acme.example.com"));
        assert_eq!(got.unwrap().1, Naming::Id("beta".into()));
    }
}
