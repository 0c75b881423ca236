//! Scientific kernels on mpirt, and what the example programs share.

/// `4096`, `64k`, `1m`, `1g`: sizes on the command line, in the forms `MPIRT_*` settings take.
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (digits, shift) = match v.chars().last()?.to_ascii_lowercase() {
        'k' => (&v[..v.len() - 1], 10),
        'm' => (&v[..v.len() - 1], 20),
        'g' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_and_without_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("1.5m"), None);
        assert_eq!(parse_size(""), None);
    }
}
