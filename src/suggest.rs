//! "Did you mean": the closeness of a misspelled name to the known ones. Used by every
//! check that names a field, a kind, a variable or a filter.

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn a_typo_is_one_or_two_edits_away() {
        assert_eq!(edit_distance("replicas", "replicas"), 0);
        assert_eq!(edit_distance("replcias", "replicas"), 2);
        assert_eq!(edit_distance("lables", "labels"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
