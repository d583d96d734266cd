//! Splits `COPY table FROM STDIN` data for a sharded table row by row over its shards (sans-IO).
//!
//! The rules are PostgreSQL's own reading of COPY data (text, CSV and binary formats): rows end
//! where PostgreSQL ends them, the key's fields are read as PostgreSQL reads them, and the row
//! goes to the shard [`key::shard_of`] gives for them. What every shard needs (the header line,
//! the binary file header and trailer) goes to every shard.

use std::mem;

use memchr::{memchr, memchr2, memchr3};

use super::key::{self, Function, KeyType, Value};

/// The format of the COPY data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
    Binary,
}

/// The columns a `FORCE_NOT_NULL` or `FORCE_NULL` option names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Columns {
    #[default]
    None,
    /// `*`: every column.
    All,
    Named(Vec<String>),
}

impl Columns {
    /// Whether the column is named; `None` when the name is needed and unknown.
    fn has(&self, name: Option<&str>) -> Option<bool> {
        match self {
            Columns::None => Some(false),
            Columns::All => Some(true),
            Columns::Named(list) => name.map(|n| list.iter().any(|c| c == n)),
        }
    }
}

/// The options of a `COPY ... FROM STDIN` that decide where its rows and fields are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub format: Format,
    pub delimiter: u8,
    pub quote: u8,
    pub escape: u8,
    pub null: Vec<u8>,
    /// The first line is a header (`HEADER true` or `HEADER MATCH`: each shard checks it).
    pub header: bool,
    /// `DEFAULT`: the marker of a column's default value (in a key column, the row is refused).
    pub default: Option<Vec<u8>>,
    /// CSV: key columns whose NULL marker is a value.
    pub force_not_null: Columns,
    /// CSV: key columns whose value equal to the NULL marker, even quoted, is NULL.
    pub force_null: Columns,
}

impl Options {
    /// PostgreSQL's defaults for `format`.
    pub fn new(format: Format) -> Options {
        let csv = format == Format::Csv;
        Options {
            format,
            delimiter: if csv { b',' } else { b'\t' },
            quote: b'"',
            escape: b'"',
            null: if csv { Vec::new() } else { b"\\N".to_vec() },
            header: false,
            default: None,
            force_not_null: Columns::None,
            force_null: Columns::None,
        }
    }
}

#[path = "copy_fields.rs"]
mod fields;
#[path = "copy_options.rs"]
mod options;

pub use options::is_ascii_safe_encoding;

/// Where a piece of COPY data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    Shard(usize),
    /// Every shard (a header).
    Every,
}

/// The newline style of text and CSV data, set by the first line's end as PostgreSQL does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eol {
    Unknown,
    Nl,
    Cr,
    CrNl,
}

/// What a binary-format buffer starts with.
enum Unit {
    /// Not complete: at least this many bytes are needed.
    Need(usize),
    /// A complete header or tuple of this length.
    Whole(usize),
    /// The trailer (field count -1).
    Trailer,
}

/// The binary format's file signature.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// The binary format's trailer: a tuple of field count -1.
const TRAILER: [u8; 2] = [0xff, 0xff];

/// Splits a COPY's data into rows and tells the shard of each. It keeps at most one partial
/// row (up to `max_row` bytes) between calls; rows inside one message are handed out in place.
pub struct Splitter {
    opts: Options,
    /// The key's columns: position in the row and type, in key order.
    keys: Vec<(usize, KeyType)>,
    /// How many fields of a row hold the key (the last key position + 1).
    need: usize,
    function: Function,
    shards: usize,
    max_row: usize,
    /// Per key column: FORCE_NOT_NULL, FORCE_NULL; `None` until the key's names are known,
    /// when the options name columns.
    forced: Option<Vec<(bool, bool)>>,
    /// The start of a row whose end has not come yet.
    partial: Vec<u8>,
    /// A key field's value with its quotes or escapes removed.
    scratch: Vec<u8>,
    eol: Eol,
    in_quote: bool,
    last_was_esc: bool,
    after_backslash: bool,
    /// The partial row ends with a CR whose next byte decides the newline.
    pending_cr: bool,
    /// Text: the line holds an unescaped `\.` (the end-of-data marker, alone or misplaced).
    marker: bool,
    header_pending: bool,
    /// Binary: the file header went out.
    header_done: bool,
    /// The end-of-data marker (text, CSV) or the trailer (binary) came: nothing more is sent.
    ended: bool,
}

impl Splitter {
    /// `key_positions`: the 0-based positions of the key's columns in each row (in key order),
    /// `key_types` their types, `function` and `shards` as for [`key::shard_of`]; `max_row`:
    /// the longest row (with its terminator) or binary tuple accepted, in bytes.
    pub fn new(
        options: Options,
        key_positions: Vec<usize>,
        key_types: Vec<KeyType>,
        function: Function,
        shards: usize,
        max_row: usize,
    ) -> Splitter {
        assert_eq!(
            key_positions.len(),
            key_types.len(),
            "a type per key column"
        );
        let need = key_positions.iter().max().map_or(0, |m| m + 1);
        let mut s = Splitter {
            header_pending: options.header,
            opts: options,
            keys: key_positions.into_iter().zip(key_types).collect(),
            need,
            function,
            shards,
            max_row,
            forced: None,
            partial: Vec::new(),
            scratch: Vec::new(),
            eol: Eol::Unknown,
            in_quote: false,
            last_was_esc: false,
            after_backslash: false,
            pending_cr: false,
            marker: false,
            header_done: false,
            ended: false,
        };
        s.resolve_forced(None);
        s
    }

    /// Names the key's columns (in key order), which a `FORCE_NOT_NULL` or `FORCE_NULL` list
    /// of column names needs: without them such a COPY's rows are refused.
    pub fn with_key_columns<S: AsRef<str>>(mut self, names: &[S]) -> Splitter {
        let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
        self.resolve_forced(Some(&names));
        self
    }

    fn resolve_forced(&mut self, names: Option<&[&str]>) {
        self.forced = (0..self.keys.len())
            .map(|k| {
                let name = names.and_then(|n| n.get(k).copied());
                Some((
                    self.opts.force_not_null.has(name)?,
                    self.opts.force_null.has(name)?,
                ))
            })
            .collect();
    }

    /// Feeds the bytes of one CopyData message (rows may span messages, and a message may hold
    /// many). Calls `out(to, bytes)` for each complete row with its terminator (text, CSV) or
    /// each whole tuple (binary), and `To::Every` for the header line (each shard's COPY skips
    /// its own first line) or the binary file header. Err(message) on malformed data.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(To, &[u8])) -> Result<(), String> {
        match self.opts.format {
            Format::Binary => self.feed_binary(data, out),
            Format::Text | Format::Csv => self.feed_lines(data, out),
        }
    }

    /// At CopyDone: a last row without terminator goes out (PostgreSQL accepts it); binary:
    /// the trailer goes to every shard (once, whether the client sent one or not). After the
    /// text format's end-of-data line `\.` nothing was sent.
    pub fn finish(&mut self, out: &mut dyn FnMut(To, &[u8])) -> Result<(), String> {
        if self.opts.format == Format::Binary {
            if !self.header_done {
                return Err("COPY file signature not recognized".into());
            }
            // One stray byte where a field count would start is the end to PostgreSQL too.
            if !self.ended && self.partial.len() > 1 {
                return Err("unexpected EOF in COPY data".into());
            }
            self.partial.clear();
            self.ended = true;
            out(To::Every, &TRAILER);
            return Ok(());
        }
        if self.ended {
            return Ok(());
        }
        if self.pending_cr {
            self.pending_cr = false;
            self.cr_alone()?;
            return self.row_end(&[], 0, 0, 1, out);
        }
        if self.partial.is_empty() {
            return Ok(());
        }
        if self.in_quote {
            return Err("unterminated CSV quoted field".into());
        }
        self.row_end(&[], 0, 0, 0, out)
    }

    fn newline_error(&self, cr: bool) -> String {
        let kind = if self.opts.format == Format::Csv {
            "unquoted"
        } else {
            "literal"
        };
        let what = if cr { "carriage return" } else { "newline" };
        format!("{kind} {what} found in data")
    }

    /// A CR not followed by LF: the end of a line, unless lines end in CRLF.
    fn cr_alone(&mut self) -> Result<(), String> {
        match self.eol {
            Eol::CrNl | Eol::Nl => Err(self.newline_error(true)),
            Eol::Unknown | Eol::Cr => {
                self.eol = Eol::Cr;
                Ok(())
            }
        }
    }

    fn feed_lines(&mut self, data: &[u8], out: &mut dyn FnMut(To, &[u8])) -> Result<(), String> {
        let csv = self.opts.format == Format::Csv;
        let (quote, delim_escape) = (self.opts.quote, self.opts.escape);
        let escape = (delim_escape != quote).then_some(delim_escape);
        let (mut start, mut i) = (0, 0);
        if self.pending_cr && !data.is_empty() && !self.ended {
            self.pending_cr = false;
            if data[0] == b'\n' {
                self.eol = Eol::CrNl;
                i = 1;
                self.row_end(data, 0, 1, 2, out)?;
            } else {
                self.cr_alone()?;
                self.row_end(data, 0, 0, 1, out)?;
            }
            start = i;
        }
        while i < data.len() && !self.ended {
            let rest = &data[i..];
            let next = if !csv {
                if self.after_backslash {
                    Some(0)
                } else {
                    memchr3(b'\\', b'\n', b'\r', rest)
                }
            } else if self.in_quote {
                match escape {
                    Some(e) => memchr2(quote, e, rest),
                    None => memchr(quote, rest),
                }
            } else {
                memchr3(quote, b'\n', b'\r', rest)
            };
            let Some(k) = next else {
                self.last_was_esc = false;
                break;
            };
            if k > 0 {
                self.last_was_esc = false;
            }
            i += k;
            let c = data[i];
            i += 1;
            if !csv {
                if self.after_backslash {
                    // In text, a backslash takes the next byte whatever it is (a newline too).
                    self.after_backslash = false;
                    self.marker |= c == b'.';
                    continue;
                }
                if c == b'\\' {
                    self.after_backslash = true;
                    continue;
                }
            } else {
                // PostgreSQL's quote tracking: an escape inside quotes makes the next quote
                // data; the escape is its own escape.
                if self.in_quote && Some(c) == escape {
                    self.last_was_esc = !self.last_was_esc;
                }
                if c == quote && !self.last_was_esc {
                    self.in_quote = !self.in_quote;
                }
                if Some(c) != escape {
                    self.last_was_esc = false;
                }
                if self.in_quote || (c != b'\n' && c != b'\r') {
                    continue;
                }
            }
            let term = if c == b'\n' {
                if matches!(self.eol, Eol::Cr | Eol::CrNl) {
                    return Err(self.newline_error(false));
                }
                self.eol = Eol::Nl;
                1
            } else if self.eol == Eol::Cr {
                1
            } else if self.eol == Eol::Nl {
                return Err(self.newline_error(true));
            } else if i == data.len() {
                self.pending_cr = true;
                break;
            } else if data[i] == b'\n' {
                self.eol = Eol::CrNl;
                i += 1;
                2
            } else {
                self.cr_alone()?;
                1
            };
            self.row_end(data, start, i, term, out)?;
            start = i;
        }
        if self.ended {
            self.partial.clear();
            return Ok(());
        }
        let rest = &data[start..];
        if self.partial.len() + rest.len() > self.max_row {
            return Err(self.too_long());
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    fn too_long(&self) -> String {
        format!(
            "COPY row is longer than {} bytes, the most pgcorral holds to route a row",
            self.max_row
        )
    }

    /// A line is complete: the partial row and `data[start..end]`, of which the last `term`
    /// bytes are its newline (0: the end of the data).
    fn row_end(
        &mut self,
        data: &[u8],
        start: usize,
        end: usize,
        term: usize,
        out: &mut dyn FnMut(To, &[u8]),
    ) -> Result<(), String> {
        if self.partial.len() + end - start > self.max_row {
            return Err(self.too_long());
        }
        let mut partial = mem::take(&mut self.partial);
        let row = if partial.is_empty() {
            &data[start..end]
        } else {
            partial.extend_from_slice(&data[start..end]);
            &partial[..]
        };
        let r = self.line(row, term, out);
        partial.clear();
        self.partial = partial;
        self.marker = false;
        r
    }

    fn line(
        &mut self,
        row: &[u8],
        term: usize,
        out: &mut dyn FnMut(To, &[u8]),
    ) -> Result<(), String> {
        let line = &row[..row.len() - term];
        let csv = self.opts.format == Format::Csv;
        // `\.` alone on a line ends the data. PostgreSQL 17 and psql say so in CSV too (18
        // reads it as a row there); in text anywhere else it is an error, and at the very
        // end of the data without a newline too.
        if (self.marker || csv) && line == b"\\." && term > 0 {
            self.ended = true;
            return Ok(());
        }
        if self.marker {
            return Err("end-of-copy marker is not alone on its line".into());
        }
        if self.header_pending {
            self.header_pending = false;
            out(To::Every, row);
            return Ok(());
        }
        let shard = self.route_line(line)?;
        out(To::Shard(shard), row);
        Ok(())
    }

    /// The shard of a text or CSV line.
    fn route_line(&mut self, line: &[u8]) -> Result<usize, String> {
        let csv = self.opts.format == Format::Csv;
        let mut values = vec![Value::Null; self.keys.len()];
        let mut bad = false;
        let mut p = 0;
        for field in 0..self.need {
            let wanted = self.keys.iter().any(|(pos, _)| *pos == field);
            let (end, next, quoted) = if csv {
                fields::csv(line, p, &self.opts, wanted.then_some(&mut self.scratch))?
            } else {
                let value = wanted.then_some(&mut self.scratch);
                fields::text(line, p, self.opts.delimiter, value)
            };
            if wanted {
                let raw = &line[p..end];
                for (k, &(pos, _)) in self.keys.iter().enumerate() {
                    if pos == field {
                        match self.value(k, raw, quoted)? {
                            Some(v) => values[k] = v,
                            None => bad = true,
                        }
                    }
                }
            }
            match next {
                Some(n) => p = n,
                None if field + 1 < self.need => {
                    return Err(format!(
                        "missing data for column {} (of the sharding key)",
                        field + 2
                    ));
                }
                None => {}
            }
        }
        if bad {
            // A key value its type cannot read: PostgreSQL refuses the row on any shard (the
            // whole COPY fails, or ON_ERROR ignore skips it), so shard 0 gets it.
            return Ok(0);
        }
        Ok(self.shard(&values))
    }

    fn shard(&self, values: &[Value]) -> usize {
        let cols: Vec<(KeyType, &Value)> = self.keys.iter().map(|k| k.1).zip(values).collect();
        key::shard_of(&cols, self.function, self.shards)
    }

    /// Key column `k`'s value from its field (raw bytes, whether quoted, unquoted value in
    /// `scratch`); `None`: not a value of its type.
    fn value(&self, k: usize, raw: &[u8], quoted: bool) -> Result<Option<Value>, String> {
        let (pos, ty) = self.keys[k];
        if !quoted && self.opts.default.as_deref() == Some(raw) {
            return Err(format!(
                "the DEFAULT marker in column {} (of the sharding key): pgcorral cannot know the column's default",
                pos + 1
            ));
        }
        let Some((force_not_null, force_null)) = self.forced.as_ref().map(|f| f[k]) else {
            return Err("FORCE_NOT_NULL or FORCE_NULL names columns: the splitter needs the key's column names".into());
        };
        let csv = self.opts.format == Format::Csv;
        let text: &[u8] = if !quoted && raw == self.opts.null {
            if !(csv && force_not_null) {
                return Ok(Some(Value::Null));
            }
            &self.opts.null
        } else {
            if csv && force_null && self.scratch == self.opts.null {
                return Ok(Some(Value::Null));
            }
            &self.scratch
        };
        Ok(Value::from_text(ty, text).ok())
    }

    fn feed_binary(&mut self, data: &[u8], out: &mut dyn FnMut(To, &[u8])) -> Result<(), String> {
        let mut i = 0;
        while !self.partial.is_empty() {
            if self.ended {
                return Err("received copy data after EOF marker".into());
            }
            match self.unit(&self.partial)? {
                Unit::Need(n) => {
                    let take = (n - self.partial.len()).min(data.len() - i);
                    if take == 0 {
                        return Ok(());
                    }
                    self.partial.extend_from_slice(&data[i..i + take]);
                    i += take;
                }
                Unit::Whole(_) => {
                    let unit = mem::take(&mut self.partial);
                    self.emit_binary(&unit, out);
                    self.partial = unit;
                    self.partial.clear();
                }
                Unit::Trailer => {
                    self.partial.clear();
                    self.ended = true;
                }
            }
        }
        while i < data.len() {
            if self.ended {
                return Err("received copy data after EOF marker".into());
            }
            match self.unit(&data[i..])? {
                Unit::Need(_) => {
                    self.partial.extend_from_slice(&data[i..]);
                    return Ok(());
                }
                Unit::Whole(n) => {
                    self.emit_binary(&data[i..i + n], out);
                    i += n;
                }
                Unit::Trailer => {
                    self.ended = true;
                    i += TRAILER.len();
                }
            }
        }
        Ok(())
    }

    fn emit_binary(&mut self, unit: &[u8], out: &mut dyn FnMut(To, &[u8])) {
        if self.header_done {
            out(To::Shard(self.route_tuple(unit)), unit);
        } else {
            self.header_done = true;
            out(To::Every, unit);
        }
    }

    /// What `b` starts with: the file header (before it went out) or a tuple.
    fn unit(&self, b: &[u8]) -> Result<Unit, String> {
        let need = |n: usize| {
            if n > self.max_row {
                Err(self.too_long())
            } else {
                Ok(Unit::Need(n))
            }
        };
        if !self.header_done {
            if b[..b.len().min(11)] != SIGNATURE[..b.len().min(11)] {
                return Err("COPY file signature not recognized".into());
            }
            if b.len() < 19 {
                return need(19);
            }
            let flags = be32(&b[11..]);
            if flags & (1 << 16) != 0 {
                return Err("invalid COPY file header (WITH OIDS)".into());
            }
            if flags & 0xfffe_0000 != 0 {
                return Err("unrecognized critical flags in COPY file header".into());
            }
            let Ok(ext) = usize::try_from(be32(&b[15..]) as i32) else {
                return Err("invalid COPY file header (missing length)".into());
            };
            return if b.len() < 19 + ext {
                need(19 + ext)
            } else if 19 + ext > self.max_row {
                Err(self.too_long())
            } else {
                Ok(Unit::Whole(19 + ext))
            };
        }
        if b.len() < 2 {
            return need(2);
        }
        let count = i16::from_be_bytes([b[0], b[1]]);
        if count == -1 {
            return Ok(Unit::Trailer);
        }
        if i32::from(count) < self.need as i32 {
            return Err(format!(
                "row field count is {count}, expected at least {} (the sharding key's columns)",
                self.need
            ));
        }
        let mut p = 2;
        for _ in 0..count {
            if b.len() < p + 4 {
                return need(p + 4);
            }
            let len = be32(&b[p..]) as i32;
            p += 4;
            if len < -1 {
                return Err("invalid field size".into());
            }
            p += usize::try_from(len).unwrap_or(0);
        }
        if b.len() < p {
            return need(p);
        }
        if p > self.max_row {
            return Err(self.too_long());
        }
        Ok(Unit::Whole(p))
    }

    /// The shard of a whole binary tuple (checked by [`Splitter::unit`]).
    fn route_tuple(&self, t: &[u8]) -> usize {
        let mut values = vec![Value::Null; self.keys.len()];
        let mut p = 2;
        for field in 0..self.need {
            let len = be32(&t[p..]) as i32;
            p += 4;
            let bytes = usize::try_from(len).ok().map(|n| &t[p..p + n]);
            p += bytes.map_or(0, <[u8]>::len);
            for (k, &(pos, ty)) in self.keys.iter().enumerate() {
                if pos == field {
                    if let Some(b) = bytes {
                        match Value::from_binary(ty, b) {
                            Ok(v) => values[k] = v,
                            // PostgreSQL refuses the row on any shard: shard 0 gets it.
                            Err(_) => return 0,
                        }
                    }
                }
            }
        }
        self.shard(&values)
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
#[path = "copy_tests.rs"]
mod tests;
