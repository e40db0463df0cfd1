//! Compile-time checks of the `buf.validate` rules a workflow will run.
//!
//! A descriptor set is user input, and its `(buf.validate.message).cel` and
//! `(buf.validate.field).cel` rules are CEL run by the same evaluator as `when` gates,
//! with the same lack of cost limits. So every CEL rule on a message type reachable
//! from the input type and from every step's request and response types must pass
//! the gate bounds of [`crate::gate::analyze`]: a finding names the type, the rule id
//! and the limit. Those bounds include the cost estimate over the rule's literals,
//! with the gate's cost model (`map` and `filter` weigh 2 in the exponent, being
//! quadratic in the evaluator; `all`, `exists`, `exists_one` weigh 1; nesting adds
//! up). What a rule costs over real data cannot be estimated here: the validator
//! converts the message itself, with no hook before it evaluates. So the engine runs
//! every rule check on a dedicated evaluation thread within a time limit
//! ([`crate::offload`], [`crate::CompiledWorkflow::violations_within`],
//! [`crate::CompiledWorkflow::parse_input_within`]).
//!
//! And a rule set that cannot be used at all (a CEL rule that does not compile, or
//! reads a field that does not exist) would refuse every check: for a
//! `validate: true` external step that strands the job, as every `complete-step`
//! fails. So the types the engine validates (the input type, and the response type of
//! every `validate: true` step) and the message types reachable from them are
//! validated once at compile time, as a default instance; an error other than a
//! plain violation is a finding naming the step and the type. A rule that errors on
//! the empty message (an unguarded `this.items[0]`) is reported too: it would error
//! on some real message as well.
//!
//! Before either, the nesting of message types is bounded ([`MAX_TYPE_NESTING`]): the
//! validator builds its evaluators by recursion over the fields' types, so a chain of
//! thousands of types, each holding the next, would overflow the thread's stack and
//! take the node down.
//!
//! Not covered: CEL in predefined rule extensions, and field rules on presence
//! fields, which the default instance leaves unset and so never evaluates.

use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};

use prost_protovalidate::Validator;
use prost_protovalidate_types::{
    FieldConstraintsExt, FieldRules, MessageConstraintsExt, field_rules,
};
use prost_reflect::{DynamicMessage, MessageDescriptor};

use crate::compile::Finding;
use crate::gate::analyze;

/// A type the workflow reads, and where the envelope names it.
pub(crate) struct TypeRoot {
    pub message: MessageDescriptor,
    pub step: Option<String>,
    pub path: String,
}

/// Every message type reachable from `root` (itself included), each once.
fn reachable(root: &MessageDescriptor, seen: &mut HashSet<String>) -> Vec<MessageDescriptor> {
    let mut found = Vec::new();
    let mut queue = VecDeque::from([root.clone()]);
    while let Some(message) = queue.pop_front() {
        if !seen.insert(message.full_name().to_owned()) {
            continue;
        }
        for field in message.fields() {
            if let Some(inner) = field.kind().as_message() {
                queue.push_back(inner.clone());
            }
        }
        found.push(message);
    }
    found
}

/// The CEL rules declared on `message` and its fields: `(label, expression)`.
fn cel_rules(message: &MessageDescriptor) -> Vec<(String, String)> {
    let mut rules = Vec::new();
    // A rule set that does not decode is the validator's finding, not this one's.
    if let Ok(Some(constraints)) = message.message_constraints() {
        for rule in constraints.cel {
            let id = rule.id.unwrap_or_default();
            rules.push((
                format!("message rule '{id}'"),
                rule.expression.unwrap_or_default(),
            ));
        }
        for (i, expression) in constraints.cel_expression.into_iter().enumerate() {
            rules.push((format!("message cel_expression[{i}]"), expression));
        }
    }
    for field in message.fields() {
        if let Ok(Some(constraints)) = field.field_constraints() {
            field_cel_rules(&constraints, field.name(), &mut rules);
        }
    }
    rules
}

fn field_cel_rules(constraints: &FieldRules, label: &str, rules: &mut Vec<(String, String)>) {
    for rule in &constraints.cel {
        let id = rule.id.clone().unwrap_or_default();
        rules.push((
            format!("rule '{id}' of field {label}"),
            rule.expression.clone().unwrap_or_default(),
        ));
    }
    for (i, expression) in constraints.cel_expression.iter().enumerate() {
        rules.push((
            format!("cel_expression[{i}] of field {label}"),
            expression.clone(),
        ));
    }
    match &constraints.r#type {
        Some(field_rules::Type::Repeated(repeated)) => {
            if let Some(items) = &repeated.items {
                field_cel_rules(items, &format!("{label}[]"), rules);
            }
        }
        Some(field_rules::Type::Map(map)) => {
            if let Some(keys) = &map.keys {
                field_cel_rules(keys, &format!("{label} (keys)"), rules);
            }
            if let Some(values) = &map.values {
                field_cel_rules(values, &format!("{label} (values)"), rules);
            }
        }
        _ => {}
    }
}

/// What [`check_bounds`] found out about the types it walked.
#[derive(Default)]
pub(crate) struct Unrunnable {
    /// Types with a CEL rule out of bounds (already a finding).
    out_of_bounds: HashSet<String>,
    /// Types with a CEL rule that does not parse, and why. Not a finding by itself:
    /// only the types the engine validates need to run.
    unparsable: HashMap<String, String>,
}

/// Applies the gate bounds to every CEL rule reachable from `roots`; a rule out of
/// bounds is a finding. Returns the types the validator must never be handed: the
/// validator parses on the calling thread, which a deeply nested rule would overflow
/// (the bounds check parses on a thread sized for it).
pub(crate) fn check_bounds(findings: &mut Vec<Finding>, roots: &[TypeRoot]) -> Unrunnable {
    let mut seen = HashSet::new();
    let mut unrunnable = Unrunnable::default();
    for root in roots {
        for message in reachable(&root.message, &mut seen) {
            let name = message.full_name().to_owned();
            for (label, expression) in cel_rules(&message) {
                match analyze(&expression) {
                    Ok(_) => {}
                    Err(reason) if reason.starts_with("is not valid CEL") => {
                        unrunnable
                            .unparsable
                            .entry(name.clone())
                            .or_insert(format!("the CEL {label} {reason}"));
                    }
                    Err(reason) => {
                        unrunnable.out_of_bounds.insert(name.clone());
                        findings.push(Finding {
                            step: root.step.clone(),
                            path: root.path.clone(),
                            message: format!("type {name}: the CEL {label} {reason}"),
                        });
                    }
                }
            }
        }
    }
    unrunnable
}

/// The deepest chain of message-typed fields a workflow's types may have (a type
/// already on the chain, a recursive type, ends it). Protobuf's own parsers stop
/// decoding at 100 levels of nesting; real schemas stay far below this.
pub const MAX_TYPE_NESTING: usize = 64;

/// The longest chain of message-typed fields from `root`, itself counted, computed
/// without recursion (the descriptor set is user input). A field whose type is already
/// on the chain (a recursive type) ends the chain there, as it ends the validator's.
pub(crate) fn nesting_depth(
    root: &MessageDescriptor,
    depths: &mut HashMap<String, usize>,
) -> usize {
    enum Visit {
        Enter(MessageDescriptor),
        Leave(MessageDescriptor),
    }
    let mut on_chain = HashSet::new();
    let mut stack = vec![Visit::Enter(root.clone())];
    while let Some(visit) = stack.pop() {
        match visit {
            Visit::Enter(message) => {
                let name = message.full_name();
                if depths.contains_key(name) || on_chain.contains(name) {
                    continue;
                }
                on_chain.insert(name.to_owned());
                stack.push(Visit::Leave(message.clone()));
                for field in message.fields() {
                    if let Some(inner) = field.kind().as_message() {
                        stack.push(Visit::Enter(inner.clone()));
                    }
                }
            }
            Visit::Leave(message) => {
                let deepest_field = message
                    .fields()
                    .filter_map(|field| {
                        let inner = field.kind().as_message()?.full_name().to_owned();
                        depths.get(&inner).copied()
                    })
                    .max()
                    .unwrap_or(0);
                on_chain.remove(message.full_name());
                depths.insert(message.full_name().to_owned(), deepest_field + 1);
            }
        }
    }
    depths.get(root.full_name()).copied().unwrap_or(1)
}

/// A finding for every root whose types nest deeper than [`MAX_TYPE_NESTING`]; true
/// when there is none (and the rules may be checked).
pub(crate) fn check_nesting(findings: &mut Vec<Finding>, roots: &[TypeRoot]) -> bool {
    let mut depths = HashMap::new();
    let mut shallow = true;
    for root in roots {
        let depth = nesting_depth(&root.message, &mut depths);
        if depth > MAX_TYPE_NESTING {
            shallow = false;
            findings.push(Finding {
                step: root.step.clone(),
                path: root.path.clone(),
                message: format!(
                    "type {} nests message types {depth} deep (a field holding a message holding a message …); at most {MAX_TYPE_NESTING} levels are accepted",
                    root.message.full_name()
                ),
            });
        }
    }
    shallow
}

/// Validates a default instance of every type reachable from `roots` (except those
/// out of bounds), so rules that cannot run are findings now, not failures later.
pub(crate) fn check_usable(
    findings: &mut Vec<Finding>,
    validator: &Validator,
    roots: &[TypeRoot],
    unrunnable: &Unrunnable,
) {
    let mut seen = HashSet::new();
    for root in roots {
        for message in reachable(&root.message, &mut seen) {
            if unrunnable.out_of_bounds.contains(message.full_name()) {
                continue;
            }
            let problem = match unrunnable.unparsable.get(message.full_name()) {
                Some(reason) => reason.clone(),
                None => {
                    let instance = DynamicMessage::new(message.clone());
                    // The bounds keep out the expressions the evaluator panics on;
                    // catching still turns any other evaluator panic into a finding.
                    match catch_unwind(AssertUnwindSafe(|| validator.validate(&instance))) {
                        Ok(Ok(()) | Err(prost_protovalidate::Error::Validation(_))) => continue,
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "the rule evaluator panicked".to_owned(),
                    }
                }
            };
            let context = if message.full_name() == root.message.full_name() {
                String::new()
            } else {
                format!(" (reached from {})", root.message.full_name())
            };
            findings.push(Finding {
                step: root.step.clone(),
                path: root.path.clone(),
                message: format!(
                    "the buf.validate rules of {}{context} cannot be used: {problem}; every check of this type would fail, so fix the rule",
                    message.full_name()
                ),
            });
        }
    }
}
