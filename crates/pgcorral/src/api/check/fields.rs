//! One JSON field read: its type, range and null-ness, with the errors noted by field path.

use serde_json::{Map, Value};

use super::Errors;

/// A required field absent or null (Ecto's words).
pub const BLANK: &str = "can't be blank";

/// A field as the request gave it.
pub enum Got<T> {
    Absent,
    Null,
    Val(T),
    /// Of the wrong type or out of range: why.
    Bad(String),
}

/// The field `v` as `f` reads it, `want` naming what it must be.
pub fn got<T>(v: Option<&Value>, want: &str, f: impl FnOnce(&Value) -> Option<T>) -> Got<T> {
    match v {
        None => Got::Absent,
        Some(Value::Null) => Got::Null,
        Some(Value::String(s)) if s.is_empty() => Got::Null,
        Some(v) => f(v).map_or_else(|| Got::Bad(format!("must be {want}")), Got::Val),
    }
}

/// A string.
pub fn text(v: Option<&Value>) -> Got<String> {
    got(v, "a string", |v| v.as_str().map(str::to_owned))
}

/// An integer from `lo` to `hi`.
pub fn int(v: Option<&Value>, lo: u64, hi: u64) -> Got<u64> {
    got(v, &format!("an integer from {lo} to {hi}"), |v| {
        v.as_u64().filter(|n| (lo..=hi).contains(n))
    })
}

/// An integer from `lo` that fits a u32.
pub fn small(v: Option<&Value>, lo: u32) -> Got<u32> {
    match int(v, lo.into(), u32::MAX.into()) {
        Got::Val(n) => Got::Val(u32::try_from(n).unwrap_or(u32::MAX)),
        Got::Absent => Got::Absent,
        Got::Null => Got::Null,
        Got::Bad(why) => Got::Bad(why),
    }
}

/// A boolean.
pub fn flag(v: Option<&Value>) -> Got<bool> {
    got(v, "true or false", Value::as_bool)
}

/// The errors found so far.
#[derive(Default)]
pub struct Check(pub Errors);

impl Check {
    /// Notes `message` about the field at `path`.
    pub fn add(&mut self, path: &str, message: impl Into<String>) {
        self.0
            .entry(path.to_owned())
            .or_default()
            .push(message.into());
    }

    /// A field that must have a value: the request's, else `old` (the stored tenant's).
    pub fn need<T: Default>(&mut self, path: &str, g: Got<T>, old: Option<T>) -> T {
        match (g, old) {
            (Got::Val(v), _) | (Got::Absent, Some(v)) => v,
            (Got::Absent | Got::Null, _) => {
                self.add(path, BLANK);
                T::default()
            }
            (Got::Bad(why), _) => {
                self.add(path, why);
                T::default()
            }
        }
    }

    /// A field that may be null: the request's, else `old`.
    pub fn maybe<T>(&mut self, path: &str, g: Got<T>, old: Option<T>) -> Option<T> {
        match g {
            Got::Val(v) => Some(v),
            Got::Null => None,
            Got::Absent => old,
            Got::Bad(why) => {
                self.add(path, why);
                None
            }
        }
    }

    /// A list of objects: `None` (kept as is) when absent.
    pub fn list<'a>(&mut self, path: &str, v: Option<&'a Value>) -> Option<&'a [Value]> {
        match v? {
            Value::Array(items) => Some(items),
            Value::Null => {
                self.add(path, BLANK);
                None
            }
            _ => {
                self.add(path, "must be a list");
                None
            }
        }
    }

    /// `value` when no error was noted.
    pub fn done<T>(self, value: T) -> Result<T, Errors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self.0)
        }
    }
}

/// `v` as an object, else an error at `path`.
pub fn object<'a>(c: &mut Check, path: &str, v: &'a Value) -> Option<&'a Map<String, Value>> {
    let o = v.as_object();
    if o.is_none() {
        c.add(path, "must be an object");
    }
    o
}
