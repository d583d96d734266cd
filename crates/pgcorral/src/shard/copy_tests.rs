//! Tests of the COPY row splitter.

use pg_query::NodeEnum;
use proptest::prelude::*;

use super::*;

const SHARDS: usize = 4;

type Out = Vec<(To, Vec<u8>)>;

fn options(sql: &str) -> Result<Options, String> {
    let parsed = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT).expect("SQL parses");
    let stmt = parsed.protobuf.stmts[0].stmt.as_ref().unwrap();
    let Some(NodeEnum::CopyStmt(c)) = stmt.node.as_ref() else {
        panic!("not a COPY: {sql}");
    };
    Options::from_copy_options(&c.options)
}

fn splitter(sql: &str, positions: Vec<usize>, types: Vec<KeyType>, max_row: usize) -> Splitter {
    Splitter::new(
        options(sql).unwrap(),
        positions,
        types,
        Function::PgHash,
        SHARDS,
        max_row,
    )
}

/// One int8 key in the row's second column.
fn int_key(sql: &str) -> Splitter {
    splitter(sql, vec![1], vec![KeyType::Int8], 1 << 20)
}

fn run(s: &mut Splitter, chunks: &[&[u8]]) -> Result<Out, String> {
    let mut got = Vec::new();
    let mut out = |to, b: &[u8]| got.push((to, b.to_vec()));
    for c in chunks {
        s.feed(c, &mut out)?;
    }
    s.finish(&mut out)?;
    Ok(got)
}

/// The shard `key::shard_of` gives the key's values.
fn shard_of(cols: &[(KeyType, Value)]) -> To {
    let cols: Vec<(KeyType, &Value)> = cols.iter().map(|(t, v)| (*t, v)).collect();
    To::Shard(key::shard_of(&cols, Function::PgHash, SHARDS))
}

fn int8(v: i64) -> To {
    shard_of(&[(KeyType::Int8, Value::Int(v))])
}

fn text(v: &[u8]) -> To {
    shard_of(&[(KeyType::Text, Value::Text(v.to_vec()))])
}

fn null() -> To {
    shard_of(&[(KeyType::Text, Value::Null)])
}

fn row(to: To, b: &[u8]) -> (To, Vec<u8>) {
    (to, b.to_vec())
}

/// Feeding `data` cut at every single point gives what feeding it whole gives.
fn same_at_every_split(make: impl Fn() -> Splitter, data: &[u8]) -> Out {
    let whole = run(&mut make(), &[data]).unwrap();
    for cut in 0..=data.len() {
        let (a, b) = data.split_at(cut);
        assert_eq!(run(&mut make(), &[a, b]).unwrap(), whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(run(&mut make(), &bytes).unwrap(), whole, "byte by byte");
    whole
}

/// The length of the file header `binary` writes.
const HEADER_LEN: usize = 22;

/// A binary tuple of these fields (`None`: NULL).
fn tuple(fields: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = (fields.len() as i16).to_be_bytes().to_vec();
    for f in fields {
        match f {
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b
}

/// Binary COPY data: the file header (with a 3-byte extension), the tuples, the trailer.
fn binary(tuples: &[Vec<u8>], trailer: bool) -> Vec<u8> {
    let mut b = SIGNATURE.to_vec();
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&3u32.to_be_bytes());
    b.extend_from_slice(b"ext");
    b.extend(tuples.concat());
    if trailer {
        b.extend_from_slice(&TRAILER);
    }
    b
}

fn binary_splitter(positions: Vec<usize>, types: Vec<KeyType>, max_row: usize) -> Splitter {
    let o = Options::new(Format::Binary);
    Splitter::new(o, positions, types, Function::PgHash, SHARDS, max_row)
}

#[test]
fn options_take_postgres_defaults_and_old_syntax() {
    let text = options("COPY t FROM STDIN").unwrap();
    assert_eq!(text, Options::new(Format::Text));
    assert_eq!((text.delimiter, &text.null[..]), (b'\t', &b"\\N"[..]));
    let csv = options("COPY t FROM STDIN WITH (FORMAT csv)").unwrap();
    assert_eq!((csv.delimiter, csv.quote, csv.escape), (b',', b'"', b'"'));
    assert!(csv.null.is_empty() && !csv.header);
    assert!(options("COPY t FROM STDIN CSV HEADER").unwrap().header);
    assert_eq!(
        options("COPY t FROM STDIN BINARY").unwrap().format,
        Format::Binary
    );
    let o = options(
        "COPY t FROM STDIN (FORMAT csv, DELIMITER ';', QUOTE '''', ESCAPE '\\', NULL 'nil', \
         HEADER match, FORCE_NOT_NULL (a, b), FORCE_NULL *, FREEZE, ENCODING 'LATIN1')",
    )
    .unwrap();
    assert_eq!((o.delimiter, o.quote, o.escape), (b';', b'\'', b'\\'));
    assert_eq!(o.null, b"nil");
    assert!(o.header);
    assert_eq!(
        o.force_not_null,
        Columns::Named(vec!["a".into(), "b".into()])
    );
    assert_eq!(o.force_null, Columns::All);
    assert!(is_ascii_safe_encoding("UTF8") && is_ascii_safe_encoding("latin-1"));
    assert!(!is_ascii_safe_encoding("Shift_JIS") && !is_ascii_safe_encoding("GB18030"));
    for (sql, header) in [
        ("HEADER false", false),
        ("HEADER on", true),
        ("HEADER 0", false),
    ] {
        let o = options(&format!("COPY t FROM STDIN ({sql})")).unwrap();
        assert_eq!(o.header, header, "{sql}");
    }
}

#[test]
fn options_postgres_or_the_splitter_refuses() {
    for (sql, why) in [
        ("(DELIMITER 'é')", "single one-byte"),
        ("(DELIMITER ',,')", "single one-byte"),
        ("(DELIMITER 'a')", "cannot be \"a\""),
        ("(DELIMITER E'\\n')", "newline"),
        ("(QUOTE '''')", "requires CSV mode"),
        ("(FORMAT binary, HEADER)", "in BINARY mode"),
        ("(FORMAT xml)", "not recognized"),
        ("(FORMAT csv, FORCE_QUOTE *)", "FORCE_QUOTE"),
        ("(ENCODING 'SJIS')", "cannot split"),
        ("(ENCODING 'win-950')", "cannot split"),
        ("(NULL 'x', NULL 'y')", "redundant"),
        ("(FORMAT csv, DELIMITER '\"')", "must be different"),
        ("(FORMAT csv, NULL '\"')", "quote character"),
        ("(HEADER 2)", "Boolean"),
        ("(NULL 'a', DEFAULT 'a')", "cannot be the same"),
        ("(FOO 1)", "option \"foo\" not recognized"),
    ] {
        let err = options(&format!("COPY t FROM STDIN {sql}")).unwrap_err();
        assert!(err.contains(why), "{sql}: {err}");
    }
}

#[test]
fn text_rows_go_to_their_keys_shard() {
    let got = run(
        &mut int_key("COPY t FROM STDIN"),
        &[b"a\t1\tx\nb\t2\n\t-7\tz\n"],
    )
    .unwrap();
    assert_eq!(
        got,
        [
            row(int8(1), b"a\t1\tx\n"),
            row(int8(2), b"b\t2\n"),
            row(int8(-7), b"\t-7\tz\n")
        ]
    );
    // The shards do differ: the test would not see a wrong choice otherwise.
    assert_ne!(int8(1), int8(2));
}

#[test]
fn text_key_is_unescaped_and_null_marker_is_null() {
    let mut s = splitter("COPY t FROM STDIN", vec![0], vec![KeyType::Text], 1 << 20);
    let data = b"a\\tb\tx\n\\N\tx\n\\101\\x42\\q\\\\\tx\nc\\\td\tx\n\\\\N\tx\n";
    let got = run(&mut s, &[data]).unwrap();
    let want = [
        row(text(b"a\tb"), b"a\\tb\tx\n"),
        row(null(), b"\\N\tx\n"),
        row(text(b"ABq\\"), b"\\101\\x42\\q\\\\\tx\n"),
        row(text(b"c\td"), b"c\\\td\tx\n"),
        row(text(b"\\N"), b"\\\\N\tx\n"),
    ];
    assert_eq!(got, want);
    let mut s = splitter(
        "COPY t FROM STDIN (NULL '')",
        vec![0],
        vec![KeyType::Text],
        99,
    );
    assert_eq!(run(&mut s, &[b"\tx\n"]).unwrap(), [row(null(), b"\tx\n")]);
}

#[test]
fn text_escaped_newline_stays_in_its_row() {
    let mut s = splitter(
        "COPY t FROM STDIN (DELIMITER '|')",
        vec![0],
        vec![KeyType::Text],
        99,
    );
    let got = run(&mut s, &[b"a\\\nb|x\nc\\|d|y\n"]).unwrap();
    assert_eq!(
        got,
        [
            row(text(b"a\nb"), b"a\\\nb|x\n"),
            row(text(b"c|d"), b"c\\|d|y\n")
        ]
    );
}

#[test]
fn csv_quotes_hold_delimiters_and_newlines() {
    let mut s = splitter("COPY t FROM STDIN CSV", vec![1], vec![KeyType::Text], 99);
    let data = b"1,\"a,b\",x\n2,\"line\nbreak\"\n3,\"say \"\"hi\"\"\",z\n4,pre\"q,x\"post\n";
    let got = run(&mut s, &[data]).unwrap();
    let want = [
        row(text(b"a,b"), b"1,\"a,b\",x\n"),
        row(text(b"line\nbreak"), b"2,\"line\nbreak\"\n"),
        row(text(b"say \"hi\""), b"3,\"say \"\"hi\"\"\",z\n"),
        row(text(b"preq,xpost"), b"4,pre\"q,x\"post\n"),
    ];
    assert_eq!(got, want);
}

#[test]
fn csv_escape_char_takes_quotes_inside_quotes_only() {
    let sql = "COPY t FROM STDIN (FORMAT csv, ESCAPE '\\')";
    let mut s = splitter(sql, vec![0], vec![KeyType::Text], 99);
    let data = b"\"a\\\"b\\\\\",x\n\"c\\d\",y\ne\\f,z\n";
    let got = run(&mut s, &[data]).unwrap();
    let want = [
        row(text(b"a\"b\\"), b"\"a\\\"b\\\\\",x\n"),
        row(text(b"c\\d"), b"\"c\\d\",y\n"),
        row(text(b"e\\f"), b"e\\f,z\n"),
    ];
    assert_eq!(got, want);
}

#[test]
fn csv_unquoted_null_marker_is_null_quoted_empty_is_not() {
    let mut s = splitter("COPY t FROM STDIN CSV", vec![0], vec![KeyType::Text], 99);
    let got = run(&mut s, &[b",x\n\"\",x\n"]).unwrap();
    assert_eq!(got, [row(null(), b",x\n"), row(text(b""), b"\"\",x\n")]);
    assert_ne!(null(), text(b""));
}

#[test]
fn csv_force_not_null_and_force_null_change_key_values() {
    let sql = "COPY t FROM STDIN (FORMAT csv, FORCE_NOT_NULL (k), FORCE_NULL (k))";
    let make = || splitter(sql, vec![0], vec![KeyType::Text], 99).with_key_columns(&["k"]);
    let got = run(&mut make(), &[b",x\n\"\",x\n"]).unwrap();
    assert_eq!(got, [row(text(b""), b",x\n"), row(null(), b"\"\",x\n")]);
    let mut other = splitter(sql, vec![0], vec![KeyType::Text], 99).with_key_columns(&["j"]);
    assert_eq!(run(&mut other, &[b",x\n"]).unwrap(), [row(null(), b",x\n")]);
    let mut unnamed = splitter(sql, vec![0], vec![KeyType::Text], 99);
    assert!(run(&mut unnamed, &[b",x\n"])
        .unwrap_err()
        .contains("column names"));
}

#[test]
fn header_line_goes_to_every_shard() {
    let got = run(
        &mut int_key("COPY t FROM STDIN CSV HEADER"),
        &[b"\"a\nb\",k\nx,5\n"],
    )
    .unwrap();
    assert_eq!(
        got,
        [row(To::Every, b"\"a\nb\",k\n"), row(int8(5), b"x,5\n")]
    );
    let got = run(&mut int_key("COPY t FROM STDIN (HEADER)"), &[b"a\tk\nx\t5"]).unwrap();
    assert_eq!(got, [row(To::Every, b"a\tk\n"), row(int8(5), b"x\t5")]);
}

#[test]
fn crlf_and_cr_line_ends_as_postgres_detects_them() {
    let got = same_at_every_split(|| int_key("COPY t FROM STDIN"), b"a\t1\r\nb\t2\r\n");
    assert_eq!(got, [row(int8(1), b"a\t1\r\n"), row(int8(2), b"b\t2\r\n")]);
    let got = same_at_every_split(|| int_key("COPY t FROM STDIN CSV"), b"a,1\r\"b\r\",2\r");
    assert_eq!(got, [row(int8(1), b"a,1\r"), row(int8(2), b"\"b\r\",2\r")]);
    for (sql, data, why) in [
        ("", &b"a\t1\nb\t2\r\n"[..], "literal carriage return"),
        ("", b"a\t1\r\nb\t2\n", "literal newline"),
        ("", b"a\t1\r\nb\t2\rc\t3\r\n", "literal carriage return"),
        ("", b"a\t1\rb\t2\n", "literal newline"),
        ("CSV", b"a,1\nb,2\r", "unquoted carriage return"),
    ] {
        let err = run(&mut int_key(&format!("COPY t FROM STDIN {sql}")), &[data]).unwrap_err();
        assert!(err.contains(why), "{data:?}: {err}");
    }
}

#[test]
fn end_marker_ends_the_data() {
    let data = b"a\t1\n\\.\nb\t2\n";
    let got = same_at_every_split(|| int_key("COPY t FROM STDIN"), data);
    assert_eq!(got, [row(int8(1), b"a\t1\n")]);
    let got = run(&mut int_key("COPY t FROM STDIN"), &[b"a\t1\r\n\\.\r\n"]).unwrap();
    assert_eq!(got, [row(int8(1), b"a\t1\r\n")]);
    let got = run(&mut int_key("COPY t FROM STDIN CSV"), &[b"a,1\n\\.\nb,2\n"]).unwrap();
    assert_eq!(got, [row(int8(1), b"a,1\n")]);
    // An escaped backslash before a dot is data.
    let mut s = splitter("COPY t FROM STDIN", vec![0], vec![KeyType::Text], 99);
    assert_eq!(
        run(&mut s, &[b"\\\\.\n"]).unwrap(),
        [row(text(b"\\."), b"\\\\.\n")]
    );
    for data in [&b"a\t1\\.\n"[..], b"\\.x\n", b"a\t1\n\\."] {
        let err = run(&mut int_key("COPY t FROM STDIN"), &[data]).unwrap_err();
        assert!(
            err.contains("end-of-copy marker is not alone"),
            "{data:?}: {err}"
        );
    }
}

#[test]
fn last_row_without_newline_goes_out_at_finish() {
    let mut s = int_key("COPY t FROM STDIN CSV");
    let mut got = Vec::new();
    s.feed(b"a,1\nb,2", &mut |to, b| got.push(row(to, b)))
        .unwrap();
    assert_eq!(got, [row(int8(1), b"a,1\n")]);
    s.finish(&mut |to, b| got.push(row(to, b))).unwrap();
    assert_eq!(got, [row(int8(1), b"a,1\n"), row(int8(2), b"b,2")]);
}

#[test]
fn rows_split_across_messages_at_every_byte() {
    let text = b"x\t10\ty\nx\\\n\t-3\n\\N\t\\N\n\t7";
    same_at_every_split(|| int_key("COPY t FROM STDIN"), text);
    let csv = b"h,k\n\"a\r\n,b\",1\n\"x\"\"\",2\r\n"; // CR LF in quotes, then a CR LF: error
    let make = || int_key("COPY t FROM STDIN CSV HEADER");
    for cut in 0..=csv.len() {
        let (a, b) = csv.split_at(cut);
        assert!(run(&mut make(), &[a, b])
            .unwrap_err()
            .contains("unquoted carriage return"));
    }
    let csv = b"h,k\n\"a\r\n,b\",1\n\"x\"\"\",2\n,,\n";
    let got = same_at_every_split(make, csv);
    let null_key = shard_of(&[(KeyType::Int8, Value::Null)]);
    assert_eq!(
        got,
        [
            row(To::Every, b"h,k\n"),
            row(int8(1), b"\"a\r\n,b\",1\n"),
            row(int8(2), b"\"x\"\"\",2\n"),
            row(null_key, b",,\n"),
        ]
    );
}

#[test]
fn rows_inside_one_message_are_handed_out_in_place() {
    let data = b"a\t1\nb\t2\n";
    let range = data.as_ptr_range();
    let mut s = int_key("COPY t FROM STDIN");
    let mut inside = 0;
    s.feed(data, &mut |_, b| {
        assert!(range.contains(&b.as_ptr()));
        inside += 1;
    })
    .unwrap();
    assert_eq!(inside, 2);
}

#[test]
fn key_value_its_type_refuses_goes_to_shard_zero() {
    let got = run(&mut int_key("COPY t FROM STDIN"), &[b"a\tabc\n"]).unwrap();
    assert_eq!(got, [row(To::Shard(0), b"a\tabc\n")]);
}

#[test]
fn multi_column_text_key_hashes_every_column() {
    let types = vec![KeyType::Text, KeyType::Int4];
    let mut s = splitter("COPY t FROM STDIN CSV", vec![2, 0], types, 99);
    let got = run(&mut s, &[b"5,x,abc\n,x,abc\n"]).unwrap();
    let key = |v| {
        shard_of(&[
            (KeyType::Text, Value::Text(b"abc".to_vec())),
            (KeyType::Int4, v),
        ])
    };
    assert_eq!(
        got,
        [
            row(key(Value::Int(5)), b"5,x,abc\n"),
            row(key(Value::Null), b",x,abc\n")
        ]
    );
}

#[test]
fn malformed_text_and_csv_are_refused() {
    for (sql, data, why) in [
        ("", &b"only\n"[..], "missing data for column 2"),
        ("CSV", b"a,\"open\n", "unterminated CSV quoted field"),
        ("(DEFAULT 'dflt')", b"a\tdflt\n", "DEFAULT marker"),
    ] {
        let err = run(&mut int_key(&format!("COPY t FROM STDIN {sql}")), &[data]).unwrap_err();
        assert!(err.contains(why), "{data:?}: {err}");
    }
}

#[test]
fn rows_longer_than_max_row_are_refused() {
    let make = || splitter("COPY t FROM STDIN", vec![0], vec![KeyType::Text], 8);
    assert_eq!(run(&mut make(), &[b"1234567\n"]).unwrap().len(), 1);
    for chunks in [
        &[&b"12345678\n"[..]][..],
        &[b"1234", b"56789"],
        &[b"123456789"],
    ] {
        assert!(run(&mut make(), chunks)
            .unwrap_err()
            .contains("longer than 8 bytes"));
    }
    // The partial row kept between messages is bounded too.
    let mut s = make();
    assert!(s.feed(b"123456789", &mut |_, _| {}).is_err());
    let mut s = binary_splitter(vec![0], vec![KeyType::Int4], 30);
    let big = binary(&[tuple(&[Some(&[0; 40])])], true);
    assert!(run(&mut s, &[&big])
        .unwrap_err()
        .contains("longer than 30 bytes"));
}

#[test]
fn binary_tuples_go_to_their_keys_shard_header_and_trailer_to_every() {
    let one = 1i32.to_be_bytes();
    let two = 2i64.to_be_bytes();
    let tuples = [
        tuple(&[Some(b"a"), Some(&one)]),
        tuple(&[Some(b"b"), None]),
        tuple(&[None, Some(&two)]),
    ];
    let data = binary(&tuples, true);
    let make = || binary_splitter(vec![1], vec![KeyType::Int8], 1 << 10);
    let got = same_at_every_split(make, &data);
    let null_key = shard_of(&[(KeyType::Int8, Value::Null)]);
    assert_eq!(
        got,
        [
            row(To::Every, &data[..HEADER_LEN]),
            row(int8(1), &tuples[0]),
            row(null_key, &tuples[1]),
            row(int8(2), &tuples[2]),
            row(To::Every, &TRAILER),
        ]
    );
    // No trailer from the client: one is added.
    let without = binary(&tuples[..1], false);
    let got = run(&mut make(), &[&without]).unwrap();
    assert_eq!(got.last().unwrap(), &row(To::Every, &TRAILER));
    assert_eq!(got.len(), 3);
}

#[test]
fn binary_multi_column_key() {
    let types = vec![KeyType::Uuid, KeyType::Text];
    let mut s = binary_splitter(vec![2, 0], types, 99);
    let u = [7u8; 16];
    let got = run(
        &mut s,
        &[&binary(&[tuple(&[Some(b"t"), None, Some(&u)])], true)],
    )
    .unwrap();
    let want = shard_of(&[
        (KeyType::Uuid, Value::Uuid(u)),
        (KeyType::Text, Value::Text(b"t".to_vec())),
    ]);
    assert_eq!(got[1].0, want);
}

#[test]
fn malformed_binary_is_refused() {
    let make = || binary_splitter(vec![1], vec![KeyType::Int4], 99);
    let good = binary(&[tuple(&[None, None])], true);
    let short = binary(&[tuple(&[None])], false);
    let mut bad_size = binary(&[], false);
    bad_size.extend_from_slice(&[0, 2, 0xff, 0xff, 0xff, 0xfe]);
    let mut oids = good.clone();
    oids[12] = 1;
    let mut after = good.clone();
    after.push(0);
    for (data, why) in [
        (&b"PGCOPY\nxx"[..], "signature not recognized"),
        (b"", "signature not recognized"),
        (&oids[..], "WITH OIDS"),
        (&short[..], "row field count is 1"),
        (&bad_size[..], "invalid field size"),
        (&after[..], "after EOF marker"),
        (&good[..good.len() - 4], "unexpected EOF"),
    ] {
        let err = run(&mut make(), &[data]).unwrap_err();
        assert!(err.contains(why), "{data:?}: {err}");
    }
}

/// A random CSV or text document of rows with an int8 key in the second column (fields with
/// quotes, delimiters, newlines, backslashes written as the format needs), and its keys.
fn document() -> impl Strategy<Value = (bool, Vec<u8>, Vec<i64>)> {
    let field = prop::collection::vec(prop::sample::select(&b"ab,\t\"\\\n\r.N"[..]), 0..6);
    let rows = prop::collection::vec((field.clone(), any::<i64>(), field), 1..12);
    (any::<bool>(), any::<bool>(), rows).prop_map(|(csv, crlf, rows)| {
        let mut doc = Vec::new();
        let mut keys = Vec::new();
        for (a, k, b) in rows {
            for (i, f) in [a, b].iter().enumerate() {
                if csv {
                    doc.push(b'"');
                    for &c in f {
                        if c == b'"' {
                            doc.push(b'"');
                        }
                        doc.push(c);
                    }
                    doc.push(b'"');
                } else {
                    for &c in f {
                        if matches!(c, b'\\' | b'\t' | b'\n' | b'\r') {
                            doc.push(b'\\');
                        }
                        doc.push(c);
                    }
                }
                if i == 0 {
                    let d = if csv { ',' } else { '\t' };
                    doc.extend_from_slice(format!("{d}{k}{d}").as_bytes());
                }
            }
            doc.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            keys.push(k);
        }
        (csv, doc, keys)
    })
}

proptest! {
    #[test]
    fn random_splits_give_the_rows_and_shards_of_the_whole(
        (csv, doc, keys) in document(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let sql = if csv { "COPY t FROM STDIN CSV" } else { "COPY t FROM STDIN" };
        let whole = run(&mut int_key(sql), &[&doc]).unwrap();
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(doc.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for p in points {
            chunks.push(&doc[at..p]);
            at = p;
        }
        chunks.push(&doc[at..]);
        prop_assert_eq!(run(&mut int_key(sql), &chunks).unwrap(), whole.clone());
        // The rows are the document's, in order, each to its key's shard.
        let bytes: Vec<u8> = whole.iter().flat_map(|(_, r)| r.clone()).collect();
        prop_assert_eq!(bytes, doc);
        let shards: Vec<To> = whole.iter().map(|(to, _)| *to).collect();
        let want: Vec<To> = keys.into_iter().map(int8).collect();
        prop_assert_eq!(shards, want);
    }
}
