//! A key column's value as a statement gives it, read as PostgreSQL reads it: a constant of
//! the text (a string, or a number of its own type, through its casts) or a Bind parameter
//! (text or binary, of the type the client's Parse gave it), stored in the key or compared
//! with it.

use pg_query::protobuf::a_const;
use pg_query::NodeEnum;

use super::key::{KeyType, Value};
use super::number::{Meets, Number, Typed};

/// A Bind parameter as the client sent it: its value (`None`: NULL), its format and the type
/// the client's Parse gave it.
#[derive(Debug, Clone, Copy)]
pub struct Param<'a> {
    pub value: Option<&'a [u8]>,
    pub binary: bool,
    pub typed: Typed,
}

/// A constant of the text (its span, quotes included) as a key value of type `ty`.
pub fn literal(text: &str, negate: bool, casts: &[Typed], ty: KeyType, assign: bool) -> Meets {
    if let Some(quoted) = text.strip_prefix('\'') {
        let Some(inner) = quoted.strip_suffix('\'') else {
            return Meets::Nothing;
        };
        return constant(&inner.replace("''", "'"), true, casts, ty, assign);
    }
    if negate {
        constant(&format!("-{text}"), false, casts, ty, assign)
    } else {
        constant(text, false, casts, ty, assign)
    }
}

/// A constant as a key value of type `ty`: a string's contents (`quoted`), or a number as
/// written (`7`, `-7.5`, `7e0`), cast by `casts`, stored in the key (`assign`) or compared
/// with it.
pub fn constant(text: &str, quoted: bool, casts: &[Typed], ty: KeyType, assign: bool) -> Meets {
    let number = !quoted;
    // Most keys: a string or an integer, uncast, read as the key's own type.
    if !ty.is_int() || (casts.is_empty() && (quoted || !text.contains(['.', 'e', 'E']))) {
        return as_key(Value::from_text(ty, text.as_bytes()));
    }
    // A number's own type: integer, else numeric (a point, an exponent, or beyond int8);
    // a string takes its first cast's.
    let (typed, casts) = match (number, casts) {
        (true, _) => {
            let whole = !text.contains(['.', 'e', 'E']);
            match whole.then(|| Number::from_text(Typed::Int(KeyType::Int8), text.as_bytes())) {
                Some(Some(n)) => (Some(n), casts),
                _ => (Number::from_text(Typed::Numeric, text.as_bytes()), casts),
            }
        }
        (false, [first, rest @ ..]) => (Number::from_text(*first, text.as_bytes()), rest),
        (false, []) => unreachable!("a string without a cast is read above"),
    };
    match typed {
        Some(n) => cast(n, casts, ty, assign, text.as_bytes()),
        None => as_key(Value::from_text(ty, text.as_bytes())),
    }
}

/// A Bind parameter as a key value of type `ty` (`None`: it cannot be read as one).
pub fn parameter(p: Param, casts: &[Typed], ty: KeyType, assign: bool) -> Option<Meets> {
    let Some(bytes) = p.value else {
        return Some(Meets::Key(Value::Null));
    };
    let as_key = || {
        if p.binary {
            Value::from_binary(ty, bytes).ok()
        } else {
            Value::from_text(ty, bytes).ok()
        }
        .map(Meets::Key)
    };
    if !ty.is_int() || (p.typed == Typed::Key && casts.is_empty()) {
        return as_key();
    }
    // An untyped parameter takes its first cast's type.
    let (typed, casts) = match (p.typed, casts) {
        (Typed::Key, [first, rest @ ..]) => (*first, rest),
        _ => (p.typed, casts),
    };
    let n = if p.binary {
        Number::from_binary(typed, bytes)
    } else {
        Number::from_text(typed, bytes)
    };
    match n {
        Some(n) => Some(cast(n, casts, ty, assign, bytes)),
        None if matches!(typed, Typed::Other | Typed::Key) => as_key(),
        // Not a value of its own type: PostgreSQL refuses it anywhere.
        None => Some(Meets::Nothing),
    }
}

/// `n` cast by `casts` in turn, then met with an integer key of type `ty`. A cast this
/// reading does not follow (to text, say) leaves the value read as the key's own, as written.
fn cast(mut n: Number, casts: &[Typed], ty: KeyType, assign: bool, written: &[u8]) -> Meets {
    for &to in casts {
        // numeric(p, s) with s > 0 rounds a fraction to s digits: not followed here.
        let scaled = matches!(to, Typed::NumericScaled(s) if s > 0) && n.has_fraction();
        if scaled || matches!(to, Typed::Other | Typed::Key) {
            return as_key(Value::from_text(ty, written));
        }
        match n.cast(to) {
            Some(next) => n = next,
            None => return Meets::Nothing,
        }
    }
    n.meets(ty, assign)
}

fn as_key<E>(v: Result<Value, E>) -> Meets {
    v.map_or(Meets::Nothing, Meets::Key)
}

/// The type a cast names, as far as an integer key cares.
pub fn cast_type(name: Option<&pg_query::protobuf::TypeName>) -> Typed {
    let Some(t) = name.filter(|t| t.array_bounds.is_empty() && !t.setof) else {
        return Typed::Other;
    };
    let Some(Some(NodeEnum::String(last))) = t.names.last().map(|n| n.node.as_ref()) else {
        return Typed::Other;
    };
    let typmods: Option<Vec<i32>> = t
        .typmods
        .iter()
        .map(|m| match m.node.as_ref() {
            Some(NodeEnum::AConst(c)) => match c.val.as_ref() {
                Some(a_const::Val::Ival(i)) => Some(i.ival),
                _ => None,
            },
            _ => None,
        })
        .collect();
    match typmods {
        Some(m) => Typed::of_name(&last.sval, &m),
        None => Typed::Other,
    }
}
