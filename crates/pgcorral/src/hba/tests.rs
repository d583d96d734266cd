//! The hba rules and cases of PgBouncer's test/hba_test.rules and test/hba_test.eval (each case:
//! the method expected for a database, user, address and TLS or replication; "reject" also
//! stands for no rule), and the lines that refuse the file (PgBouncer skips them; PostgreSQL
//! refuses the file).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use super::*;

/// The rules of PgBouncer's hba test, odd whitespace included.
const RULES: &str = "# methods under test: trust, reject, md5, password, peer, cert\n\
# whitespace only, then a comment after tabs\n \t \t \t\n\t\t\t# z\n\
host\t\tpgbouncer\tpgbouncer\t127.0.0.1/32\ttrust\n\
local\t\tdbp\t\tall\t\t\t\t\tpeer\n\
local\t\tall\t\tuserp\t\t\t\t\tpassword\n\
local\t\tdbz\t\tuserz\t\t\t\t\ttrust\n\
local\t\tdbs\t\tusers\t\t\t\t\tscram-sha-256\n\
local\t\tall\t\tall\t\t\t\t\tmd5\n\
hostssl\t\tall\t\tall\t10.0.0.0/8\t\t\tcert\n\
hostnossl\tall\t\tall\t11.0.0.0/8\t\t\tmd5\n\
host\t\tall\t\tall\t127.0.0.0  255.255.255.0\tpassword\n\
host\t\tdb1\t\tall\t0.0.0.0/0\t\t\tmd5\n\
host\t\tall\t\tuser1\t15.0.0.0/8\t\t\tmd5\n\
host\t\ttmp1,all\tuser1,user2 , user3\t\t\t16.0.0.0/8\tmd5\n\
host\t\ttmp2,all\tu1,u2,u3,u4,u5,u6,u7,u8,u9,u10,u11,u2\t17.0.0.0/8\tmd5\n\
host\t\td1,d2,d3,d4,d5,d6,d7,d8,d9,d10,d11\tt18user\t\t18.0.0.0/8\ttrust # a comment\n\
host\t\t\"all\"\t\t\"all\"\t\t19.0.0.0/8\tcert\n\
host\t\t\"q1\"\"q2\"\t\"a , b\"\t\t19.0.0.0/8\tcert\n\
host\t\tmdb\tmuser\t\t199.199.199.199/32\tcert\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/9\t\ttrust\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/8\t\tmd5\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/7\t\tcert\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/6\t\tpassword\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/5\t\tcert\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/4\t\ttrust\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/3\t\tmd5\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/2\t\tpassword\n\
host\t\tmdb2\tmuser\t\t128.0.0.0/1\t\tcert\n\
host\t\tmdb\tmuser\t\tff11::0/16\t\tmd5\n\
host\t\tmdb\tmuser\t\tff20::/12\t\tmd5\n\
host\t\tmdb\tmuser\t\t::1/128\t\t\ttrust\n\
host\t\tmdb3\tmuser\t\tall\t\t\tscram-sha-256\n\
host\t\tmdb4\tmuser\t\tall\t\t\treject\n\
host\t\treplication\tadmin\t::1/128\t\t\ttrust\n\
host\t\tdb2,replication\tadmin2\t::1/128\t\t\ttrust\n";

/// Expected method, database, user, address ("unix" for the socket), and "tls" or
/// "replication".
const CASES: &[(&str, &str, &str, &str, &str)] = &[
    // the socket
    ("md5", "db", "user", "unix", ""),
    ("peer", "dbp", "user", "unix", ""),
    ("password", "db", "userp", "unix", ""),
    ("trust", "dbz", "userz", "unix", ""),
    ("scram-sha-256", "dbs", "users", "unix", ""),
    // hostssl
    ("cert", "db", "user", "10.1.1.1", "tls"),
    ("reject", "db", "user", "10.1.1.1", ""),
    ("reject", "db", "user", "13.1.1.1", ""),
    // hostnossl
    ("reject", "db", "user", "11.1.1.1", "tls"),
    ("md5", "db", "user", "11.1.1.1", ""),
    // address and separate mask
    ("password", "db", "user", "127.0.0.2", "tls"),
    ("password", "db", "user", "127.0.0.3", ""),
    ("reject", "db", "user", "127.0.1.4", ""),
    // by database
    ("reject", "db1x", "user", "127.0.1.4", ""),
    ("md5", "db1", "user", "127.0.1.4", ""),
    // by user
    ("md5", "db1z", "user1", "15.0.0.1", ""),
    ("reject", "db1z", "user2", "15.0.0.1", ""),
    // user lists with spaces around a comma
    ("reject", "db2", "user", "16.0.0.1", ""),
    ("md5", "db2", "user1", "16.0.0.1", ""),
    ("md5", "db2", "user2", "16.0.0.1", ""),
    ("md5", "db2", "user3", "16.0.0.1", ""),
    ("reject", "db2", "user4", "16.0.0.1", ""),
    // long lists
    ("md5", "db2", "u1", "17.0.0.1", ""),
    ("md5", "db2", "u6", "17.0.0.1", ""),
    ("md5", "db2", "u10", "17.0.0.1", ""),
    ("md5", "db2", "u11", "17.0.0.1", ""),
    ("reject", "d1", "user", "18.0.0.2", ""),
    ("trust", "d1", "t18user", "18.0.0.2", ""),
    ("trust", "d5", "t18user", "18.0.0.2", ""),
    ("trust", "d11", "t18user", "18.0.0.2", ""),
    // quoted keywords are plain names
    ("reject", "db", "t19user", "19.0.0.2", ""),
    ("cert", "all", "all", "19.0.0.2", ""),
    ("cert", "q1\"q2", "a , b", "19.0.0.2", ""),
    // prefixes
    ("cert", "mdb", "muser", "199.199.199.199", ""),
    ("reject", "mdb", "muser", "199.199.199.198", ""),
    ("reject", "mdb", "muser", "199.199.199.200", ""),
    ("cert", "mdb2", "muser", "254.1.1.1", ""),
    // IPv6
    ("md5", "mdb", "muser", "ff11:2::1", ""),
    ("md5", "mdb", "muser", "ff22:3::1", ""),
    ("trust", "mdb", "muser", "::1", ""),
    ("reject", "mdb", "muser", "::2", ""),
    // address "all"
    ("scram-sha-256", "mdb3", "muser", "1.2.3.4", ""),
    ("scram-sha-256", "mdb3", "muser", "face::1", ""),
    ("reject", "mdb4", "muser", "1.2.3.4", ""),
    ("reject", "mdb4", "muser", "face::1", ""),
    // physical replication matches only the `replication` keyword, which nothing else matches
    ("reject", "mdb", "muser", "::1", "replication"),
    ("reject", "db", "userp", "unix", "replication"),
    ("reject", "replication", "userp", "unix", "replication"),
    ("trust", "db", "admin", "::1", "replication"),
    ("trust", "replication", "admin", "::1", "replication"),
    ("reject", "db", "admin", "::1", ""),
    ("reject", "replication", "admin", "::1", ""),
    ("trust", "db", "admin2", "::1", "replication"),
    ("trust", "replication", "admin2", "::1", "replication"),
    ("trust", "db2", "admin2", "::1", ""),
    ("reject", "replication", "admin2", "::1", ""),
];

pub fn no_files(p: &Path) -> std::io::Result<String> {
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        p.display().to_string(),
    ))
}

pub fn parse(text: &str) -> Result<(Hba, Vec<String>), Refused> {
    Hba::parse(
        Path::new("/etc/pgb/hba.conf"),
        text,
        Ident::default(),
        &mut no_files,
    )
}

pub fn login<'a>(database: &'a str, user: &'a str, from: &str, extra: &str) -> Login<'a> {
    Login {
        from: (from != "unix").then(|| from.parse::<IpAddr>().unwrap()),
        tls: extra == "tls",
        replication: extra == "replication",
        database,
        user,
    }
}

/// A machine with addresses 127.0.0.1/8, 192.168.7.10/24 and ::1/128, and a user whose
/// roles are `roles` (`None`: not looked up).
pub struct Fixed {
    pub roles: Option<BTreeSet<String>>,
}

impl Host for Fixed {
    fn interfaces(&self) -> std::io::Result<Vec<(IpAddr, IpAddr)>> {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        Ok(vec![
            (ip("127.0.0.1"), ip("255.0.0.0")),
            (ip("192.168.7.10"), ip("255.255.255.0")),
            (ip("::1"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
        ])
    }

    fn roles(&self) -> Option<&BTreeSet<String>> {
        self.roles.as_ref()
    }
}

/// The first matching rule, with [`Fixed`]'s machine and no roles looked up.
pub fn eval<'a>(hba: &'a Hba, login: &Login<'_>) -> Option<&'a Rule> {
    hba.eval(login, &Fixed { roles: None }).unwrap()
}

#[test]
fn pgbouncers_hba_cases() {
    let (hba, warnings) = parse(RULES).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    for &(expected, db, user, from, extra) in CASES {
        let got = eval(&hba, &login(db, user, from, extra)).map_or("reject", |r| r.method.name());
        assert_eq!(got, expected, "{db} {user} {from} {extra}");
    }
}

#[test]
fn an_ipv4_client_on_an_ipv6_socket_matches_ipv4_rules() {
    let (hba, _) = parse("host all all 10.0.0.0/8 trust\n").unwrap();
    let mapped = login("db", "u", "::ffff:10.1.2.3", "");
    assert_eq!(eval(&hba, &mapped).map(|r| r.line), Some(1));
}

#[test]
fn a_line_pgcorral_cannot_honour_refuses_the_file_naming_file_and_line() {
    let text = "local all all trust\n\
        host all all example.org md5\n\
        host all all 10.0.0.0/33 md5\n\
        host all all 10.0.0.0 md5\n\
        local all all ident\n\
        local all all peer map=nomap\n\
        local all all trust clientcert=1\n\
        local all all\n\
        include other.conf\n\
        local \"open all trust\n\
        host all all 10.1.0.0/8 md5\n\
        local all @missing trust\n\
        host all all samehost rejct\n\
        local all /^adm.*$ reject\n\
        hostx all all all trust\n\
        local all all ldap\n\
        host all all 300.1.2.3/8 trust\n\
        local all all trust map=x\n";
    let refused = parse(text).unwrap_err();
    assert_eq!(refused.file, "/etc/pgb/hba.conf");
    let lines: Vec<usize> = refused
        .errors
        .iter()
        .map(|w| {
            let rest = w.strip_prefix("/etc/pgb/hba.conf:").expect(w);
            rest.split(':').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(
        lines,
        [2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18],
        "{refused:#?}"
    );
    let e = &refused.errors;
    assert!(
        e[0].ends_with(
            "host names (\"example.org\") are not supported by pgcorral: write the address"
        ),
        "{}",
        e[0]
    );
    assert!(e[1].contains("invalid CIDR mask"), "{}", e[1]);
    assert!(e[2].contains("invalid IP mask \"md5\""), "{}", e[2]);
    assert!(
        e[3].contains("authentication method \"ident\" is not supported by pgcorral"),
        "{}",
        e[3]
    );
    assert!(
        e[4].contains("\"nomap\" is not in auth_ident_file"),
        "{}",
        e[4]
    );
    assert!(
        e[5].contains("\"clientcert=1\" is not supported"),
        "{}",
        e[5]
    );
    assert!(
        e[7].contains("could not open file \"/etc/pgb/other.conf\""),
        "{}",
        e[7]
    );
    assert!(
        e[10].contains("invalid authentication method \"rejct\""),
        "{}",
        e[10]
    );
    assert!(e[11].contains("regular expressions"), "{}", e[11]);
    assert!(refused
        .to_string()
        .starts_with("hba file /etc/pgb/hba.conf refused: /etc/pgb/hba.conf:2: "));
    // Bits outside the mask: a warning, and the rule stays (masked).
    let (hba, warnings) = parse("local all all trust\nhost all all 10.1.0.0/8 md5\n").unwrap();
    assert_eq!(
        warnings,
        ["/etc/pgb/hba.conf:2: address 10.1.0.0 has bits outside its mask; they are ignored"]
    );
    assert_eq!(
        eval(&hba, &login("d", "u", "10.9.9.9", "")).map(|r| r.line),
        Some(2)
    );
}

#[test]
fn at_files_list_names_relative_to_the_including_file() {
    let mut read = |p: &Path| match p.to_str() {
        Some("/etc/pgb/dbs") => Ok("app, \"my db\"\n\n# comment\nshop @more\n".to_string()),
        Some("/etc/pgb/more") => Ok("extra".to_string()),
        Some("/abs/users") => Ok("alice bob".to_string()),
        _ => no_files(p),
    };
    let (hba, warnings) = Hba::parse(
        Path::new("/etc/pgb/hba.conf"),
        "host @dbs @/abs/users all scram-sha-256\n",
        Ident::default(),
        &mut read,
    )
    .unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    for db in ["app", "my db", "shop", "extra"] {
        assert!(
            eval(&hba, &login(db, "bob", "1.2.3.4", "")).is_some(),
            "{db}"
        );
    }
    assert!(eval(&hba, &login("other", "bob", "1.2.3.4", "")).is_none());
    assert!(eval(&hba, &login("app", "carol", "1.2.3.4", "")).is_none());
}

#[test]
fn sameuser_and_maps() {
    let (ident, w) = Ident::parse("ident", "ops root postgres\n");
    assert!(w.is_empty());
    let (hba, warnings) = Hba::parse(
        Path::new("hba.conf"),
        "local sameuser all peer\nlocal all all peer map=ops\nhostssl all all all cert map=ops\n",
        ident,
        &mut no_files,
    )
    .unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let r = eval(&hba, &login("alice", "alice", "unix", "")).unwrap();
    assert_eq!((r.line, r.map.as_deref()), (1, None));
    let r = eval(&hba, &login("shop", "alice", "unix", "")).unwrap();
    assert_eq!(
        (r.line, r.map.as_deref(), r.method),
        (2, Some("ops"), Method::Peer)
    );
    assert!(hba.ident.allows("ops", "root", "postgres"));
    assert_eq!(eval(&hba, &login("d", "u", "::1", "tls")).unwrap().line, 3);
}

#[test]
fn a_missing_file_is_refused() {
    let refused = Hba::load("/nonexistent/pgcorral/hba.conf", "").unwrap_err();
    assert!(refused.errors[0]
        .starts_with("could not open hba config file /nonexistent/pgcorral/hba.conf"));
}
