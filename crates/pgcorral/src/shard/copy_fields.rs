//! Reading one field of a text or CSV line as PostgreSQL does: where it ends, whether it was
//! quoted, and its value.

use super::Options;

/// A text field from `p`: (its end, the next field's start, false); its value with escapes
/// undone in `value` when given.
pub(super) fn text(
    line: &[u8],
    p: usize,
    delim: u8,
    value: Option<&mut Vec<u8>>,
) -> (usize, Option<usize>, bool) {
    let mut i = p;
    let (end, next) = loop {
        match line.get(i) {
            None => break (line.len(), None),
            // A backslash takes the next byte, a delimiter too.
            Some(b'\\') => i = (i + 2).min(line.len()),
            Some(&c) if c == delim => break (i, Some(i + 1)),
            Some(_) => i += 1,
        }
    };
    if let Some(v) = value {
        v.clear();
        unescape_text(&line[p..end], v);
    }
    (end, next, false)
}

/// A CSV field from `p`: (its end, the next field's start, whether quoted); its value without
/// quotes and escapes in `value` when given.
pub(super) fn csv(
    line: &[u8],
    p: usize,
    opts: &Options,
    mut value: Option<&mut Vec<u8>>,
) -> Result<(usize, Option<usize>, bool), String> {
    let (delim, quote, escape) = (opts.delimiter, opts.quote, opts.escape);
    if let Some(v) = value.as_deref_mut() {
        v.clear();
    }
    let mut push = |b: u8| {
        if let Some(v) = value.as_deref_mut() {
            v.push(b);
        }
    };
    let mut quoted = false;
    let mut i = p;
    loop {
        // Outside quotes: up to a delimiter, a quote or the end.
        loop {
            match line.get(i) {
                None => return Ok((i, None, quoted)),
                Some(&c) if c == delim => return Ok((i, Some(i + 1), quoted)),
                Some(&c) if c == quote => break,
                Some(&c) => push(c),
            }
            i += 1;
        }
        quoted = true;
        i += 1;
        // Inside quotes: up to the closing quote; the escape byte takes a quote or an escape.
        loop {
            let Some(&c) = line.get(i) else {
                return Err("unterminated CSV quoted field".into());
            };
            i += 1;
            if c == escape {
                if let Some(&n) = line.get(i).filter(|&&n| n == escape || n == quote) {
                    push(n);
                    i += 1;
                    continue;
                }
            }
            if c == quote {
                break;
            }
            push(c);
        }
    }
}

/// A text-format field's value: backslash escapes undone as PostgreSQL does.
fn unescape_text(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        // A backslash at the end of the line is dropped.
        let Some(&e) = raw.get(i) else { break };
        i += 1;
        let byte = match e {
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                v as u8
            }
            b'x' => match raw.get(i).and_then(|&d| (d as char).to_digit(16)) {
                Some(h) => {
                    i += 1;
                    let mut v = h;
                    if let Some(l) = raw.get(i).and_then(|&d| (d as char).to_digit(16)) {
                        v = v * 16 + l;
                        i += 1;
                    }
                    v as u8
                }
                None => b'x',
            },
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            other => other,
        };
        out.push(byte);
    }
}
