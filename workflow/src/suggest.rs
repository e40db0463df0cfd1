//! "Did you mean …?": the closest of a set of valid names to a misspelled one.

/// Longest name a suggestion is looked for: past it no candidate is a likely typo,
/// and comparing costs time proportional to the name's length.
const MAX_NAME_CHARS: usize = 128;
/// Most character comparisons one suggestion may cost (a schema of thousands of
/// messages stops being searched there).
const MAX_COMPARISONS: usize = 4_000_000;

/// The candidate closest to `name`, when one is close enough to be a likely typo:
/// an edit distance of at most a third of the name's length (at least 1), or the
/// same name in another case. Ties go to the first candidate. Bounded: names longer
/// than [`MAX_NAME_CHARS`] get no suggestion, candidates whose length alone rules
/// them out are not compared, and the search stops after [`MAX_COMPARISONS`].
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let length = name.chars().count();
    if length == 0 || length > MAX_NAME_CHARS {
        return None;
    }
    let limit = (length / 3).max(1);
    let lowered = name.to_lowercase();
    let mut budget = MAX_COMPARISONS;
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate.is_empty() || candidate == name {
            continue;
        }
        let other = candidate.chars().count();
        if other.abs_diff(length) > limit {
            continue;
        }
        let cost = length * other;
        if cost > budget {
            break;
        }
        budget -= cost;
        let distance = if candidate.to_lowercase() == lowered {
            0
        } else {
            strsim::damerau_levenshtein(name, candidate)
        };
        if distance <= limit && best.is_none_or(|(found, _)| distance < found) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
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

    #[test]
    fn a_hostile_name_or_schema_costs_little() {
        let long = "x".repeat(100_000);
        assert_eq!(
            did_you_mean(&long, [long.as_str()]),
            None,
            "too long to suggest for"
        );
        let many: Vec<String> = (0..100_000).map(|i| format!("pkg.Message{i:06}")).collect();
        let started = std::time::Instant::now();
        let _ = did_you_mean("pkg.Messag000001", many.iter().map(String::as_str));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
