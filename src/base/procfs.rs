//! Fields of `/proc/<pid>/stat`, read the one way: counted after the command name.

/// Field `n` (1-based, as `proc(5)` numbers them) of a `/proc/<pid>/stat` line. The
/// command name (field 2) may hold spaces and parentheses, so fields are counted from the
/// last `)`.
pub fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::stat_field;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0";
        assert_eq!(stat_field(stat, 5), Some(42));
        assert_eq!(stat_field(stat, 22), Some(12345));
        // The state is no number; fields 1 and 2 are not counted from here.
        assert_eq!(stat_field(stat, 3), None);
        assert_eq!(stat_field(stat, 2), None);
        assert_eq!(stat_field("no command name", 3), None);
    }
}
