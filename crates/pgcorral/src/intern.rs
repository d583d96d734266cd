//! Values that many long-lived holders share, kept once in a set: each holder keeps a pointer.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// The kept `Arc` equal to `value`, kept now if there was none. When a kept value is let go is
/// the set owner's rule: it knows who may still hold one.
pub fn kept<T: Hash + Eq>(set: &mut HashSet<Arc<T>>, value: T) -> Arc<T> {
    if let Some(k) = set.get(&value) {
        return k.clone();
    }
    let k = Arc::new(value);
    set.insert(k.clone());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_kept_copy() {
        let mut set = HashSet::new();
        let a = kept(&mut set, ("app", "alice"));
        let b = kept(&mut set, ("app", "alice"));
        let c = kept(&mut set, ("app", "bob"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(set.len(), 2);
    }
}
