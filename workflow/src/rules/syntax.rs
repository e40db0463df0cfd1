//! A rule as written: `target = source`, `target += source`, `-target`, parsed.

use std::fmt;

/// One parsed mapping rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    /// Field names from the built message down to the target field.
    pub target: Vec<String>,
    /// What to do there.
    pub op: RuleOp,
}

/// The three operations.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleOp {
    /// `target = source`
    Assign(Source),
    /// `target += source`
    Append(Source),
    /// `-target`
    Clear,
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A dotted path: `input.text`, `tokenize.ids`, or a whole scope (`input`).
    Path {
        /// `input` or an earlier step's name.
        root: String,
        /// Field names below the root.
        fields: Vec<String>,
    },
    /// A constant.
    Literal(Literal),
}

/// A constant written in a rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// A JSON string literal.
    String(String),
    /// An integer that fits i64.
    Int(i64),
    /// An integer above i64::MAX.
    UInt(u64),
    /// A number with a fraction or exponent.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Path { root, fields } if fields.is_empty() => f.write_str(root),
            Source::Path { root, fields } => write!(f, "{root}.{}", fields.join(".")),
            Source::Literal(literal) => write!(f, "{literal:?}"),
        }
    }
}

/// Parses one rule; the error says what is wrong with it and what is expected.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(
            "empty rule: expected `target = source`, `target += source` or `-target`".into(),
        );
    }
    let (target, op) = if let Some(cleared) = trimmed.strip_prefix('-') {
        (cleared.trim(), RuleOp::Clear)
    } else {
        let Some(eq) = trimmed.find('=') else {
            return Err(format!(
                "'{trimmed}' has no '=': expected `target = source`, `target += source` or `-target`"
            ));
        };
        let (left, right) = (&trimmed[..eq], trimmed[eq + 1..].trim());
        let (target, append) = match left.strip_suffix('+') {
            Some(target) => (target, true),
            None => (left, false),
        };
        if right.is_empty() {
            return Err(format!(
                "'{trimmed}' has nothing after '=': name a source path or a literal"
            ));
        }
        let source = parse_source(right)?;
        (
            target.trim(),
            if append {
                RuleOp::Append(source)
            } else {
                RuleOp::Assign(source)
            },
        )
    };
    let target = parse_path(target).map_err(|e| format!("target of '{trimmed}': {e}"))?;
    Ok(Rule {
        text: trimmed.to_owned(),
        target,
        op,
    })
}

pub(super) fn parse_source(text: &str) -> Result<Source, String> {
    if text.starts_with('"') {
        let value: String = serde_json::from_str(text)
            .map_err(|e| format!("string literal {text} is not a valid JSON string: {e}"))?;
        return Ok(Source::Literal(Literal::String(value)));
    }
    match text {
        "true" => return Ok(Source::Literal(Literal::Bool(true))),
        "false" => return Ok(Source::Literal(Literal::Bool(false))),
        _ => {}
    }
    if text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
        if let Ok(int) = text.parse::<i64>() {
            return Ok(Source::Literal(Literal::Int(int)));
        }
        if let Ok(uint) = text.parse::<u64>() {
            return Ok(Source::Literal(Literal::UInt(uint)));
        }
        return match text.parse::<f64>() {
            // A literal with a non-zero digit that parses to zero underflowed: refuse
            // it rather than let `1e-400` become a silent 0.
            Ok(float) if float == 0.0 && has_nonzero_digit(text) => Err(format!(
                "'{text}' is too small for any number type and would become 0"
            )),
            Ok(float) if float.is_finite() => Ok(Source::Literal(Literal::Float(float))),
            _ => Err(format!("'{text}' is not a number literal")),
        };
    }
    let mut fields = parse_path(text)?;
    let root = fields.remove(0);
    Ok(Source::Path { root, fields })
}

/// A dotted path (`input.chunks`): its segments, each an identifier.
pub fn parse_path(text: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = text.split('.').map(|p| p.trim().to_owned()).collect();
    for part in &parts {
        let mut chars = part.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "'{text}' is not a dotted field path (bad segment '{part}')"
            ));
        }
    }
    Ok(parts)
}

/// True when the mantissa of a number literal (before any exponent) has a non-zero digit.
fn has_nonzero_digit(text: &str) -> bool {
    text.split(['e', 'E'])
        .next()
        .is_some_and(|mantissa| mantissa.chars().any(|c| ('1'..='9').contains(&c)))
}
