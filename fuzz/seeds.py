#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target to fuzz/corpus/<target>/seed-*: real protocol
messages (startup packets, a frontend pipeline as psql, pgbench and drivers send it, a server's
answers, a complete SCRAM exchange with a valid proof for the targets' fixed secret), SQL texts
from the issue and from the unit tests of the scanners, and the TOML examples of
docs/configuration.md. Run from anywhere: python3 fuzz/seeds.py. Deterministic; files a run of
cargo fuzz adds later live beside the seeds (minimised with cargo fuzz cmin)."""

import base64
import hashlib
import hmac
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def msg(tag, body):
    return tag + struct.pack(">i", len(body) + 4) + body


def cstr(s):
    return s.encode() + b"\0"


def startup(params, version=196608):
    body = struct.pack(">i", version) + b"".join(cstr(k) + cstr(v) for k, v in params) + b"\0"
    return struct.pack(">i", len(body) + 4) + body


# --- startup packets -------------------------------------------------------------------------
STARTUPS = {
    "psql": startup([("user", "postgres"), ("database", "postgres"),
                     ("application_name", "psql"), ("client_encoding", "UTF8")]),
    "pgbench": startup([("user", "bench"), ("database", "bench")]),
    "options": startup([("user", "app"), ("database", "db"),
                        ("options", "-c search_path=a -c statement_timeout=5s"),
                        ("_pq_.protocol", "x")], version=196610),
    "ssl": struct.pack(">ii", 8, 80877103),
    "gssenc": struct.pack(">ii", 8, 80877104),
    "cancel": struct.pack(">iiii", 16, 80877102, 4242, -7),
    "v2": struct.pack(">ii", 8, 0x20000),
    "no_terminator": startup([("user", "a")])[:-1],
    "newline_user": startup([("user", "evil\nFATAL: forged"), ("database", "db")]),
    "ssl_then_startup": struct.pack(">ii", 8, 80877103) + startup([("user", "a")]),
}
for name, data in STARTUPS.items():
    write("startup_packet", name, data)

# --- frontend messages -----------------------------------------------------------------------
PIPELINE = (
    msg(b"P", b"\0SELECT abalance FROM pgbench_accounts WHERE aid = $1\0\0\x01\0\0\0\x17")
    + msg(b"B", b"\0\0\0\x01\0\0\0\x01\0\0\0\x0512345\0\x01\0\0")
    + msg(b"D", b"P\0")
    + msg(b"E", b"\0\0\0\0\0")
    + msg(b"S", b"")
)
NAMED = (
    msg(b"P", b"s1\0INSERT INTO r VALUES ($1)\0\0\0")
    + msg(b"B", b"p1\0s1\0\0\0\0\x01\0\0\0\x031.5\0\0")
    + msg(b"E", b"p1\0\0\0\0\0")
    + msg(b"C", b"Ss1\0")
    + msg(b"H", b"")
    + msg(b"S", b"")
)
SIMPLE = msg(b"Q", b"BEGIN;\0") + msg(b"Q", b"SET search_path = a\0") + msg(b"Q", b"COMMIT\0")
COPY = (msg(b"Q", b"COPY t FROM STDIN\0") + msg(b"d", b"1\tx\n") + msg(b"c", b"")
        + msg(b"f", b"oops\0"))
FRONTEND = {
    "pipeline": PIPELINE,
    "named": NAMED,
    "simple": SIMPLE,
    "copy": COPY,
    "listen": msg(b"Q", b"LISTEN chan\0") + msg(b"X", b""),
    "parse_no_nul": msg(b"P", b"\0SELECT 1") + msg(b"S", b""),
    "function_call": msg(b"F", b"\0\0\x04\xd2\0\0\0\0\0\0"),
    "bad_length": b"Q\0\0\0\x02",
    "huge_length": b"Q\x7f\xff\xff\xff",
    "execute_sql": msg(b"Q", b"EXECUTE p(1)\0"),
}
for name, data in FRONTEND.items():
    write("frontend_framing", name, b"\x20" + data)
    write("frontend_framing", name + "_small_cap", b"\x03" + data)

# --- backend messages ------------------------------------------------------------------------
def error(fields, tag=b"E"):
    return msg(tag, b"".join(k + cstr(v) for k, v in fields) + b"\0")


STALE = error([(b"S", "ERROR"), (b"V", "ERROR"), (b"C", "0A000"),
               (b"M", "cached plan must not change result type"), (b"F", "plancache.c"),
               (b"L", "735"), (b"R", "RevalidateCachedQuery")])
BACKEND = {
    "login": (msg(b"R", struct.pack(">i", 10) + b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0")
              + msg(b"R", struct.pack(">i", 0))
              + msg(b"S", b"server_version\x0015.8\0") + msg(b"S", b"TimeZone\0UTC\0")
              + msg(b"K", struct.pack(">ii", 1234, -99)) + msg(b"Z", b"I")),
    "md5": msg(b"R", struct.pack(">i", 5) + b"abcd"),
    "rows": (msg(b"T", b"\0\x01abalance\0\0\0\0\0\0\x01\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0")
             + msg(b"D", b"\0\x01\0\0\0\x011") + msg(b"C", b"SELECT 1\0") + msg(b"Z", b"T")),
    "error": error([(b"S", "FATAL"), (b"V", "FATAL"), (b"C", "57P01"),
                    (b"M", "terminating connection due to administrator command")])
    + msg(b"Z", b"E"),
    "stale": STALE + msg(b"Z", b"I"),
    "notice": error([(b"S", "NOTICE"), (b"C", "00000"), (b"M", "hi")], b"N")
    + msg(b"A", struct.pack(">i", 77) + b"chan\0payload\0"),
    "localized": error([(b"S", "FEHLER"), (b"C", "42P01"), (b"M", "Relation")]),
    "extended": (msg(b"1", b"") + msg(b"2", b"") + msg(b"t", b"\0\x01\0\0\0\x17")
                 + msg(b"n", b"") + msg(b"s", b"") + msg(b"3", b"") + msg(b"I", b"")
                 + msg(b"Z", b"I")),
    "copy_in": msg(b"G", b"\0\0\x01\0\0") + msg(b"C", b"COPY 1\0") + msg(b"Z", b"I"),
    "unterminated_error": msg(b"E", b"SERROR\0CXX000"),
}
for name, data in BACKEND.items():
    write("backend_messages", name, data)

# --- SCRAM: a whole exchange with the targets' fixed secret ------------------------------------
PASSWORD, SALT, ITER = b"pencil", b"salt", 1
SNONCE, CNONCE = "3rfcNHYJY1ZVvWVs7j", "rOprNGfwEbeRWgbNEkqO"


def keys():
    salted = hashlib.pbkdf2_hmac("sha256", PASSWORD, SALT, ITER)
    ck = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    sk = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return ck, hashlib.sha256(ck).digest(), sk


def transcript(gs2, cnonce, snonce, cbind_data=b""):
    ck, stored, sk = keys()
    bare = f"n=,r={cnonce}"
    first = gs2 + bare
    server_first = f"r={cnonce}{snonce},s={base64.b64encode(SALT).decode()},i={ITER}"
    cbind = base64.b64encode(gs2.encode() + cbind_data).decode()
    without = f"c={cbind},r={cnonce}{snonce}"
    auth = f"{bare},{server_first},{without}".encode()
    sig = hmac.new(stored, auth, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(ck, sig))).decode()
    server_final = "v=" + base64.b64encode(hmac.new(sk, auth, hashlib.sha256).digest()).decode()
    return first, server_first, f"{without},p={proof}", server_final


SEP = b"\xff"
f, sf, cf, sfin = transcript("n,,", "fyko+d2lbbFgONRv9qkxdawL", SNONCE)
write("scram_server", "plain", b"\0" + SEP + f.encode() + SEP + cf.encode())
write("scram_server", "select_plain", b"\x02SCRAM-SHA-256" + SEP + f.encode() + SEP + cf.encode())
f2, _, cf2, _ = transcript("p=tls-server-end-point,,", "fyko+d2lbbFgONRv9qkxdawL", SNONCE,
                           bytes([0x03] * 32))
write("scram_server", "plus", b"\x03SCRAM-SHA-256-PLUS" + SEP + f2.encode() + SEP + cf2.encode())
write("scram_server", "downgrade", b"\x01" + SEP + b"y,,n=,r=abc" + SEP)
write("scram_server", "bad", b"\0" + SEP + b"n,a=authz,n=,r=x" + SEP + b"c=biws,r=x,p=AAAA")

f, sf, cf, sfin = transcript("n,,", CNONCE, SNONCE)
write("scram_client", "plain", b"\0" + SEP + sf.encode() + SEP + sfin.encode())
write("scram_client", "negotiate",
      b"\x02SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0" + SEP + sf.encode() + SEP + sfin.encode())
write("scram_client", "error", b"\0" + SEP + sf.encode() + SEP + b"e=invalid-proof")
write("scram_client", "extensions", b"\0" + SEP + (sf + ",x=1").encode() + SEP + b"v=AAAA,y=2")

# --- stored secrets --------------------------------------------------------------------------
_, stored, sk = keys()
write("auth_secrets", "pg_verifier",
      b"SCRAM-SHA-256$4096:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY="
      b":RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=")
write("auth_secrets", "own_verifier",
      f"SCRAM-SHA-256${ITER}:{base64.b64encode(SALT).decode()}$"
      f"{base64.b64encode(stored).decode()}:{base64.b64encode(sk).decode()}".encode())
write("auth_secrets", "md5", b"md5" + hashlib.md5(b"pwuser").hexdigest().encode())
write("auth_secrets", "md5_plaintext", b"md5pass")

# --- SQL texts -------------------------------------------------------------------------------
SQL = [
    "SELECT abalance FROM pgbench_accounts WHERE aid = 1;",
    "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1;",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 1, 1, "
    "CURRENT_TIMESTAMP);",
    "BEGIN; SELECT 1; END;",
    "select \"set_config\"('role','r',false)",
    "select pg_catalog.\"set_config\"('search_path','x',false)",
    "select U&\"set\\005fconfig\"('role','r',false)",
    "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
    "PREPARE p AS select set_config('role','r',false); EXECUTE p",
    "DO $$ BEGIN PERFORM set_config('role','r',false); END $$",
    "DO $x$ BEGIN SET ROLE r; END $x$ LANGUAGE plpgsql",
    "SET ROLE tenant_1",
    "SET LOCAL search_path = a",
    "RESET ALL",
    "DISCARD ALL",
    "LISTEN chan; NOTIFY chan, 'x'",
    "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "CREATE TEMP TABLE t(x int)",
    "SELECT pg_advisory_lock(1)",
    "PREPARE s1(int, numeric(10, 2)) AS SELECT $1, $2",
    "EXECUTE s1(1, 2.5)",
    "EXECUTE s1",
    "DEALLOCATE PREPARE s1",
    "DEALLOCATE ALL",
    "deallocate \"all\"",
    "/* pgcorral: role=replica */ SELECT 1",
    "-- pgcorral: role=primary\nSELECT 1",
    "SET SERVER ROLE replica",
    "SHOW SERVER ROLE",
    "SELECT * FROM t WHERE a = 'x''y' AND b = $1 AND c = E'\\n'",
    "SELECT $tag$ ; set x $tag$",
    "WITH w AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM w",
    "BEGIN READ ONLY",
    "START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY",
    "SELECT nextval('seq')",
    "SELECT 1 FOR UPDATE",
    "SHOW POOLS",
    "SHOW STATS",
    "KILL db",
    "PAUSE \"db\"",
    "RELOAD;",
    "SET default_pool_size = 20",
]


def literals(path):
    """The string literals of a Rust file's test module, unescaped roughly."""
    text = open(os.path.join(ROOT, path)).read()
    tests = text[text.find("#[cfg(test)]"):] if "#[cfg(test)]" in text else text
    out = []
    for m in re.finditer(r'b?"((?:[^"\\]|\\.)*)"', tests):
        s = m.group(1)
        s = re.sub(r"\\u\{([0-9a-fA-F]+)\}", lambda u: chr(int(u.group(1), 16)), s)
        try:
            s = s.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            continue
        if 3 <= len(s) <= 300:
            out.append(s)
    return out


SCANNER_SOURCES = [
    "crates/pgcorral/src/session/scan.rs",
    "crates/pgcorral/src/prepared/sql.rs",
    "crates/pgcorral/src/route/hint.rs",
    "crates/pgcorral/src/route/classify.rs",
    "crates/pgcorral/src/admin/command.rs",
]
texts = list(SQL)
for src in SCANNER_SOURCES:
    texts += literals(src)
seen = set()
texts = [t for t in texts if not (t in seen or seen.add(t))]
for i, t in enumerate(texts):
    b = t.encode("utf-8", "surrogatepass")
    for target in ("session_classify", "prepared_sql", "route_hint", "admin_command"):
        write(target, f"{i:03}", b)
    if i < len(SQL):
        write("route_classify", f"{i:03}", b + SEP + re.sub(rb"\d+", b"7", b))

# --- the lexer against PostgreSQL's scanner: texts that parse, one of each rule ------------------
LEX_ORACLE = {
    "cr-comment": "select 1 --\r, set_config('ro' || 'le', 'x', false)",
    "dollar-tag": "select $\u00e9$ ' $\u00e9$, set_config('role', 'x', false) --'",
    "uescape": "select U&\"d!0061ta\" UESCAPE '!', U&'\\0041' UESCAPE E'\\x21' from t",
    "literals": "select 'a'\n'b', E'a\\'b', B'101', X'1F', N'x', 1.5e10, .5, 0x1F, 1_000, $1 from t",
    "operators": "select a+-- c\nb, a*/*c*/b, x /* /* */ */ :: int, f(a => 1) from t; select \"A\"\"b\"",
}
for name, text in LEX_ORACLE.items():
    write("session_lex_oracle", name, text.encode())

# --- the relay's scans -----------------------------------------------------------------------
for name, data in FRONTEND.items():
    for flags in (0, 1, 2, 4):
        write("relay_client", f"{name}_{flags}", bytes([flags, 0x31]) + data)
# The fuzzer's find: a refused LISTEN in reads of 3 and 1 bytes was forwarded.
write("relay_client", "refuse_split_listen", bytes.fromhex("0202510000000d4c495354454e207800"))
for name, data in BACKEND.items():
    for flags in (1, 5, 9):
        write("relay_server", f"{name}_{flags}", bytes([flags, 0x52]) + data)

# --- config files ----------------------------------------------------------------------------
doc = open(os.path.join(ROOT, "docs", "configuration.md")).read()
for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc, re.S)):
    block = "\n".join(line[2:] if line.startswith("  ") else line for line in block.split("\n"))
    write("config_toml", f"doc{i}", block.encode())
write("config_toml", "minimal", b"""[general]
listen_addr = "127.0.0.1:6432"
auth_type = "scram-sha-256"
pool_mode = "transaction"

[users.app]
password = "secret"

[databases.bench]
host = "127.0.0.1"
port = 5432
pool_size = 20
""")
