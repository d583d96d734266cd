//! What PostgreSQL honours and pgcorral now does too: `samehost`, `samenet`, `+role`,
//! `samerole`/`samegroup` (asked of the server only when they decide), the connection types
//! `hostgssenc` (never matches) and `hostnogssenc`, and the `include` directives; a rule that
//! cannot be decided is never passed over.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::tests::{eval, login, parse, Fixed};
use super::*;

fn roles(names: &[&str]) -> Option<BTreeSet<String>> {
    Some(names.iter().map(|s| s.to_string()).collect())
}

#[test]
fn samehost_and_samenet_are_this_machine_s_addresses() {
    let (hba, _) = parse(
        "host all all samehost reject\n\
         host all all samenet md5\n\
         host all all all trust\n",
    )
    .unwrap();
    let line = |from: &str| eval(&hba, &login("d", "u", from, "")).map(|r| r.line);
    assert_eq!(line("127.0.0.1"), Some(1));
    assert_eq!(line("::ffff:192.168.7.10"), Some(1));
    assert_eq!(line("::1"), Some(1));
    assert_eq!(line("127.0.0.2"), Some(2));
    assert_eq!(line("192.168.7.200"), Some(2));
    assert_eq!(line("192.168.8.1"), Some(3));
    assert_eq!(line("::2"), Some(3));

    /// A machine whose interfaces cannot be listed.
    struct Broken;
    impl Host for Broken {
        fn interfaces(&self) -> std::io::Result<Vec<(IpAddr, IpAddr)>> {
            Err(std::io::Error::other("no"))
        }
        fn roles(&self) -> Option<&BTreeSet<String>> {
            None
        }
    }
    let e = hba
        .eval(&login("d", "u", "10.0.0.1", ""), &Broken)
        .unwrap_err();
    assert!(matches!(e, Undecided::Interfaces(_)), "{e:?}");
    // The socket never asks.
    let (hba, _) = parse("host all all samehost reject\nlocal all all trust\n").unwrap();
    assert_eq!(
        hba.eval(&login("d", "u", "unix", ""), &Broken)
            .unwrap()
            .map(|r| r.line),
        Some(2)
    );
}

#[test]
fn roles_are_asked_only_when_they_decide() {
    let (hba, _) = parse(
        "host all +admins 10.0.0.0/8 reject\n\
         host samerole all all md5\n\
         host all \"+quoted\",all 11.0.0.0/8 md5\n\
         host all all all trust\n",
    )
    .unwrap();
    assert!(hba.asks_roles());
    let at = |db, user, from, roles| {
        hba.eval(&login(db, user, from, ""), &Fixed { roles })
            .map(|r| r.map(|r| r.line))
    };
    // Not looked up yet: asked for, never passed over.
    assert_eq!(at("d", "bob", "10.1.1.1", None), Err(Undecided::Roles));
    assert_eq!(at("d", "bob", "12.1.1.1", None), Err(Undecided::Roles));
    assert_eq!(at("d", "bob", "11.1.1.1", None), Err(Undecided::Roles));
    // A rule that matches whatever the roles: no need to ask.
    let (plain, _) = parse("host all all,+admins all trust\n").unwrap();
    assert_eq!(
        plain
            .eval(&login("d", "u", "1.1.1.1", ""), &Fixed { roles: None })
            .unwrap()
            .map(|r| r.line),
        Some(1)
    );
    // Looked up: membership (the user itself included, as the lookup answers) decides.
    assert_eq!(
        at("d", "bob", "10.1.1.1", roles(&["bob", "admins"])),
        Ok(Some(1))
    );
    assert_eq!(at("d", "bob", "10.1.1.1", roles(&["bob"])), Ok(Some(4)));
    assert_eq!(
        at("sales", "bob", "12.1.1.1", roles(&["bob", "sales"])),
        Ok(Some(2))
    );
    assert_eq!(at("sales", "bob", "12.1.1.1", roles(&["bob"])), Ok(Some(4)));
    // A quoted "+quoted" is a name.
    assert_eq!(at("d", "+quoted", "11.1.1.1", roles(&[])), Ok(Some(3)));
    // Physical replication matches only `replication`: samerole is not asked.
    assert_eq!(
        hba.eval(
            &login("d", "bob", "12.1.1.1", "replication"),
            &Fixed { roles: None }
        )
        .map(|r| r.map(|r| r.line)),
        Ok(None)
    );
}

#[test]
fn keywords_as_postgresql_reads_them() {
    let (hba, _) = parse(
        "host sameuser all 1.0.0.0/8 trust\n\
         host all sameuser 2.0.0.0/8 trust\n\
         hostgssenc all all all reject\n\
         hostnogssenc all all 3.0.0.0/8 md5\n",
    )
    .unwrap();
    let line = |db, user, from| eval(&hba, &login(db, user, from, "")).map(|r| r.line);
    assert_eq!(line("alice", "alice", "1.1.1.1"), Some(1));
    assert_eq!(line("shop", "alice", "1.1.1.1"), None);
    // In the user column, sameuser is a name.
    assert_eq!(line("sameuser", "sameuser", "2.1.1.1"), Some(2));
    assert_eq!(line("shop", "shop", "2.1.1.1"), None);
    // pgcorral has no GSSAPI encryption: hostgssenc never matches, hostnogssenc always.
    assert_eq!(line("d", "u", "3.1.1.1"), Some(4));

    // A backslash at the end of a line goes on on the next; the rule is the first line's.
    let (hba, _) = parse("# x\nhost all \\\n  carol,\\\ndave 4.0.0.0/8 \\\n trust\n").unwrap();
    assert_eq!(hba.rules.len(), 1);
    assert_eq!(
        eval(&hba, &login("d", "dave", "4.1.1.1", "")).map(|r| r.line),
        Some(2)
    );
}

/// Files in memory, listed by directory.
struct Memory(Vec<(PathBuf, String)>);

impl Files for Memory {
    fn read(&mut self, path: &Path) -> std::io::Result<String> {
        self.0
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "missing"))
    }

    fn list(&mut self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let found: Vec<PathBuf> = self
            .0
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, _)| p.clone())
            .collect();
        match found.is_empty() {
            true => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no dir")),
            false => Ok(found.into_iter().rev().collect()),
        }
    }
}

#[test]
fn includes_as_postgresql_16_reads_them() {
    let files = |extra: &[(&str, &str)]| {
        let mut v: Vec<(PathBuf, String)> = [
            ("/etc/pgb/first.conf", "host all alice all reject\n"),
            ("/etc/pgb/hba.d/20-b.conf", "host all carol all reject\n"),
            (
                "/etc/pgb/hba.d/10-a.conf",
                "host all bob all reject\ninclude deep.rules\n",
            ),
            ("/etc/pgb/hba.d/.hidden.conf", "host all dave all reject\n"),
            ("/etc/pgb/hba.d/notes.txt", "host all erin all reject\n"),
            ("/etc/pgb/hba.d/deep.rules", "host all frank all reject\n"),
        ]
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
        v.extend(extra.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())));
        Memory(v)
    };
    let text = "include first.conf\n\
        include_if_exists absent.conf\n\
        include_dir hba.d\n\
        host all all all trust\n";
    let (hba, warnings) = Hba::parse(
        Path::new("/etc/pgb/hba.conf"),
        text,
        Ident::default(),
        &mut files(&[]),
    )
    .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("/etc/pgb/hba.conf:2: skipping missing authentication file"));
    let at = |user| {
        eval(&hba, &login("d", user, "1.1.1.1", "")).map(|r| (r.file.to_string(), r.line, r.method))
    };
    assert_eq!(
        at("alice"),
        Some(("/etc/pgb/first.conf".into(), 1, Method::Reject))
    );
    assert_eq!(
        at("bob"),
        Some(("/etc/pgb/hba.d/10-a.conf".into(), 1, Method::Reject))
    );
    // Included from hba.d/10-a.conf, relative to it, before 20-b.conf; include_dir takes
    // only `.conf` files.
    assert_eq!(
        at("frank").map(|r| r.0),
        Some("/etc/pgb/hba.d/deep.rules".into())
    );
    assert_eq!(hba.rules[2].file.as_ref(), "/etc/pgb/hba.d/deep.rules");
    assert_eq!(
        at("carol").map(|r| r.0),
        Some("/etc/pgb/hba.d/20-b.conf".into())
    );
    assert_eq!(at("dave").map(|r| r.2), Some(Method::Trust));
    assert_eq!(at("erin").map(|r| r.2), Some(Method::Trust));

    // A bad line in an included file refuses the whole file, naming that file.
    let e = Hba::parse(
        Path::new("/etc/pgb/hba.conf"),
        text,
        Ident::default(),
        &mut files(&[("/etc/pgb/hba.d/30-c.conf", "host all all samehost ident\n")]),
    )
    .unwrap_err();
    assert_eq!(
        e.errors,
        ["/etc/pgb/hba.d/30-c.conf:1: authentication method \"ident\" is not supported by pgcorral"]
    );
    // A missing `include` or `include_dir`, and an include loop.
    for (text, why) in [
        (
            "include nope.conf\n",
            "could not open file \"/etc/pgb/nope.conf\"",
        ),
        (
            "include_dir nope.d\n",
            "could not open directory \"/etc/pgb/nope.d\"",
        ),
        ("include loop.conf\n", "maximum nesting depth exceeded"),
        ("include\n", "missing file name after \"include\""),
    ] {
        let e = Hba::parse(
            Path::new("/etc/pgb/hba.conf"),
            text,
            Ident::default(),
            &mut files(&[("/etc/pgb/loop.conf", "include loop.conf\n")]),
        )
        .unwrap_err();
        assert!(e.errors[0].contains(why), "{text}: {e}");
    }
}
