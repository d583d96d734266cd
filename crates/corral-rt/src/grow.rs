//! Growth of the slot tables (an executor's tasks, a reactor's sockets) by a step, not by doubling.

/// The least a full table grows by, in slots: 24 KiB of an executor's task slots, 16 KiB of a
/// reactor's socket slots.
const MIN_STEP: usize = 1024;

/// Pushes `item` onto `table` and returns its index. A full table grows by an eighth of its
/// length, at least [`MIN_STEP`] slots, where a `Vec` would double: 5,000 tasks hold 5,120
/// slots, not 8,192. (Room not yet used costs memory only where the allocator hands out pages
/// written before, as in a reused block: fresh pages take none until written.)
///
/// An eighth, not a step of a fixed size: with a fixed step each growth would copy the whole
/// table, the square of its length in all, where an eighth copies about eight times its length
/// in all, whatever the allocator does. With glibc there is mostly nothing to copy: a block
/// past the mmap threshold (128 KiB at first) is a mapping of its own, which `realloc` grows
/// with `mremap`, moving pages rather than bytes. The eighth is for a table below the
/// threshold, which glibc raises (up to 32 MiB) to the size of any mapped block freed, and for
/// other allocators.
pub(crate) fn push<T>(table: &mut Vec<T>, item: T) -> usize {
    if table.len() == table.capacity() {
        table.reserve_exact((table.len() / 8).max(MIN_STEP));
    }
    table.push(item);
    table.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_grows_by_a_step_of_at_least_an_eighth() {
        let mut table = Vec::new();
        for i in 0..5_000 {
            assert_eq!(push(&mut table, i), i);
        }
        assert_eq!(
            table.capacity(),
            5 * MIN_STEP,
            "five steps of 1,024 hold 5,000"
        );
        table.resize(16 * MIN_STEP, 0);
        table.shrink_to_fit();
        push(&mut table, 0);
        assert_eq!(
            table.capacity(),
            18 * MIN_STEP,
            "an eighth of 16,384 past it"
        );
    }
}
