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

/// The candidate nearest to `word` (case aside), if it is near enough to be a likely
/// mistake for it: at most a third of its length, and at least 2, apart.
pub fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .map(|c| (edit_distance(&w, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod closest_tests {
    #[test]
    fn the_nearest_within_a_third_of_the_word() {
        let c = ["spec.service.type", "spec.replicas"];
        assert_eq!(
            super::closest("spec.serviceType", c.into_iter()),
            Some("spec.service.type")
        );
        assert_eq!(super::closest("spec.zzz", c.into_iter()), None);
    }
}
