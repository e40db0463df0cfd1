//! The target globs of the outbound policy and of TLS settings: `*` matches any run
//! of bytes.

/// True when `target` (`host:port`) matches `pattern`, where `*` matches any run of
/// characters (a fleet's `[[jobs.target_limits]]` use the policy's globs).
pub fn target_matches(pattern: &str, target: &str) -> bool {
    glob_matches(pattern.as_bytes(), target.as_bytes())
}

/// `*` matches any run of bytes; everything else matches itself. Greedy with one
/// backtrack point (the last `*`), so the cost is at most pattern × text, never
/// exponential in the number of stars: targets come from workflow authors.
pub(crate) fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            // Let the last star swallow one more byte and try again from there.
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}
