//! "Did you mean …?": the closest of a set of valid names to a misspelled one.

/// The candidate closest to `name`, when one is close enough to be a likely typo:
/// an edit distance of at most a third of the name's length (at least 1), or the
/// same name in another case. Ties go to the first candidate.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    if name.is_empty() {
        return None;
    }
    let limit = (name.chars().count() / 3).max(1);
    let lowered = name.to_lowercase();
    candidates
        .into_iter()
        .filter(|candidate| !candidate.is_empty() && *candidate != name)
        .map(|candidate| {
            let distance = if candidate.to_lowercase() == lowered {
                0
            } else {
                strsim::damerau_levenshtein(name, candidate)
            };
            (distance, candidate)
        })
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn a_near_name_is_suggested_and_a_far_one_is_not() {
        let keys = ["worker_count", "lease_ms", "poll_interval_ms"];
        assert_eq!(did_you_mean("workers_count", keys), Some("worker_count"));
        assert_eq!(did_you_mean("lease", keys), None);
        assert_eq!(did_you_mean("LEASE_MS", keys), Some("lease_ms"));
        assert_eq!(did_you_mean("word", ["words", "text"]), Some("words"));
        assert_eq!(did_you_mean("zzz", ["words", "text"]), None);
        assert_eq!(did_you_mean("", ["a"]), None);
    }
}
