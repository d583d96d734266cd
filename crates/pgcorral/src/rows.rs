//! Result sets pgcorral answers itself (the admin console; the router's answer to a role query):
//! named columns, text or bigint as PgBouncer types them, and rows, encoded as RowDescription,
//! DataRows and CommandComplete.

use bytes::{BufMut, BytesMut};
use pgwire::backend as be;

const TEXT_OID: u32 = 25;
const INT8_OID: u32 = 20;

/// Column types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Text,
    Int,
}

/// One result set.
pub struct Table {
    columns: Vec<(&'static str, Ty)>,
    rows: Vec<Vec<Option<String>>>,
}

/// A cell value.
pub enum Cell {
    Null,
    Text(String),
    Int(i128),
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

macro_rules! int_cell {
    ($($t:ty),*) => {$(
        impl From<$t> for Cell {
            fn from(v: $t) -> Cell {
                Cell::Int(v as i128)
            }
        }
    )*};
}
int_cell!(u8, u16, u32, u64, usize, i32, i64, bool);

impl Table {
    pub fn new(columns: &[(&'static str, Ty)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Columns named `names`, all text.
    pub fn text(names: &[&'static str]) -> Table {
        Table::new(&names.iter().map(|n| (*n, Ty::Text)).collect::<Vec<_>>())
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "row width");
        self.rows.push(
            cells
                .into_iter()
                .map(|c| match c {
                    Cell::Null => None,
                    Cell::Text(s) => Some(s),
                    Cell::Int(i) => Some(i.to_string()),
                })
                .collect(),
        );
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The RowDescription (for Describe and for the answer itself).
    pub fn describe(&self, out: &mut BytesMut) {
        pgwire::encode::message(out, be::ROW_DESCRIPTION, |b| {
            b.put_i16(self.columns.len() as i16);
            for (name, ty) in &self.columns {
                b.put_slice(name.as_bytes());
                b.put_u8(0);
                b.put_u32(0); // table
                b.put_i16(0); // column
                let (oid, len) = match ty {
                    Ty::Text => (TEXT_OID, -1),
                    Ty::Int => (INT8_OID, 8),
                };
                b.put_u32(oid);
                b.put_i16(len);
                b.put_i32(-1); // typmod
                b.put_i16(0); // text format
            }
        });
    }

    /// The rows and the command tag `SHOW`.
    pub fn rows(&self, out: &mut BytesMut) {
        for row in &self.rows {
            pgwire::encode::message(out, be::DATA_ROW, |b| {
                b.put_i16(row.len() as i16);
                for cell in row {
                    match cell {
                        None => b.put_i32(-1),
                        Some(v) => {
                            b.put_i32(v.len() as i32);
                            b.put_slice(v.as_bytes());
                        }
                    }
                }
            });
        }
        pgwire::encode::command_complete(out, "SHOW");
    }
}
