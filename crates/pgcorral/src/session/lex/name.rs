//! The names PostgreSQL makes of identifiers in a UTF8 database: `""` undone, `U&` escapes
//! decoded (parser.c's str_udeescape), cut to NAMEDATALEN - 1 bytes at a character boundary
//! (scansup.c's truncate_identifier with pg_mbcliplen).

use std::borrow::Cow;

/// NAMEDATALEN - 1: the longest name PostgreSQL keeps, in bytes.
const NAME_MAX: usize = 63;

/// `text` with each doubled `quote` made one.
pub(super) fn undouble(text: &[u8], quote: u8) -> Cow<'_, [u8]> {
    if !text.windows(2).any(|w| w == [quote, quote]) {
        return Cow::Borrowed(text);
    }
    let mut v = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        v.push(text[i]);
        i += if text[i] == quote && text.get(i + 1) == Some(&quote) {
            2
        } else {
            1
        };
    }
    Cow::Owned(v)
}

/// A name cut to [`NAME_MAX`] bytes as PostgreSQL cuts it: whole characters only, a
/// character's length read from its first byte (a byte that starts none counts as one).
pub(super) fn truncate(name: Cow<'_, [u8]>) -> Cow<'_, [u8]> {
    if name.len() <= NAME_MAX {
        return name;
    }
    let mut n = 0;
    while n < name.len() && name[n] != 0 {
        let len = match name[n] {
            b if b < 0x80 => 1,
            b if b & 0xe0 == 0xc0 => 2,
            b if b & 0xf0 == 0xe0 => 3,
            b if b & 0xf8 == 0xf0 => 4,
            _ => 1,
        };
        if n + len > NAME_MAX {
            break;
        }
        n += len;
    }
    match name {
        Cow::Borrowed(b) => Cow::Borrowed(&b[..n]),
        Cow::Owned(mut v) => {
            v.truncate(n);
            Cow::Owned(v)
        }
    }
}

/// A `U&` identifier's name from its text (`""` already undone) and escape character: the
/// escape doubled is itself, followed by four hex digits or by `+` and six it is that code
/// point (UTF-16 surrogates only in pairs); `None` where PostgreSQL reports an error.
pub(super) fn unicode(text: &[u8], escape: u8) -> Option<Vec<u8>> {
    let mut v = Vec::with_capacity(text.len());
    // The first half of a surrogate pair, waiting for the second.
    let mut high: Option<u32> = None;
    let mut i = 0;
    while i < text.len() {
        if text[i] != escape {
            if high.is_some() {
                return None;
            }
            v.push(text[i]);
            i += 1;
            continue;
        }
        if text.get(i + 1) == Some(&escape) {
            if high.is_some() {
                return None;
            }
            v.push(escape);
            i += 2;
            continue;
        }
        let (from, n) = match text.get(i + 1) {
            Some(b'+') => (i + 2, 6),
            _ => (i + 1, 4),
        };
        let digits = text.get(from..from + n)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let cp = u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        i = from + n;
        if cp == 0 || cp > 0x10ffff {
            return None;
        }
        let cp = match (high.take(), cp) {
            (Some(h), 0xdc00..=0xdfff) => 0x10000 + ((h - 0xd800) << 10) + (cp - 0xdc00),
            (Some(_), _) | (None, 0xdc00..=0xdfff) => return None,
            (None, 0xd800..=0xdbff) => {
                high = Some(cp);
                continue;
            }
            (None, cp) => cp,
        };
        let mut buf = [0; 4];
        v.extend_from_slice(char::from_u32(cp)?.encode_utf8(&mut buf).as_bytes());
    }
    if high.is_some() {
        return None;
    }
    // PostgreSQL checks that the result is text of the database's encoding.
    std::str::from_utf8(&v).ok()?;
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubled_quotes_are_undone() {
        assert_eq!(&*undouble(b"a\"\"b\"\"", b'"'), b"a\"b\"");
        assert!(matches!(undouble(b"ab", b'"'), Cow::Borrowed(_)));
    }

    #[test]
    fn names_are_cut_at_63_bytes_on_a_character_boundary() {
        let long = "a".repeat(70);
        assert_eq!(truncate(Cow::Borrowed(long.as_bytes())).len(), 63);
        // é is two bytes: 62 + 2 > 63, so it goes whole.
        let name = format!("{}é", "a".repeat(62));
        assert_eq!(
            &*truncate(Cow::Borrowed(name.as_bytes())),
            "a".repeat(62).as_bytes()
        );
        let name = format!("{}日本", "a".repeat(60));
        assert_eq!(
            &*truncate(Cow::Owned(name.into_bytes())),
            format!("{}日", "a".repeat(60)).as_bytes()
        );
        // Not UTF-8: cut all the same, never past the end.
        let junk = [0xf0u8; 70];
        assert_eq!(truncate(Cow::Borrowed(&junk[..])).len(), 60);
        assert_eq!(truncate(Cow::Borrowed(b"short")).len(), 5);
    }

    #[test]
    fn unicode_escapes_are_decoded() {
        let u = |t: &str, e: u8| unicode(t.as_bytes(), e).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(u("d\\0061t\\+000061", b'\\').as_deref(), Some("data"));
        assert_eq!(u("set!005fconfig", b'!').as_deref(), Some("set_config"));
        assert_eq!(u("a!!b", b'!').as_deref(), Some("a!b"));
        assert_eq!(u("a\\\\b", b'\\').as_deref(), Some("a\\b"));
        assert_eq!(u("\\00e9\\+01F600", b'\\').as_deref(), Some("é😀"));
        // A surrogate pair makes one character.
        assert_eq!(u("\\D83D\\DE00", b'\\').as_deref(), Some("😀"));
        assert_eq!(u("\\D83D\\+00DE00", b'\\').as_deref(), Some("😀"));
        // What PostgreSQL rejects.
        for bad in [
            "\\",
            "\\12",
            "\\12g4",
            "\\+12345",
            "\\0000",
            "\\+110000",
            "\\D83D",
            "\\D83Dx",
            "\\DE00",
            "\\D83D\\0041",
            "\\D83D\\\\",
        ] {
            assert_eq!(u(bad, b'\\'), None, "{bad}");
        }
        // Another escape leaves backslashes alone.
        assert_eq!(u("a\\0061", b'!').as_deref(), Some("a\\0061"));
    }
}
