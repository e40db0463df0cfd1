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

use crate::finding::Finding;
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

/// The deepest chain of message-typed fields a workflow's types may have. Protobuf's
/// own parsers stop decoding at 100 levels of nesting; real schemas stay far below
/// this.
pub const MAX_TYPE_NESTING: usize = 64;

/// An upper bound on how deep the validator recurses from each type reachable from
/// `roots`, by full name, computed without recursion (the descriptor set is user
/// input).
///
/// The validator builds a type's evaluator by building its fields' types first, and a
/// type already being built ends that branch. So the chain it walks visits each type
/// at most once, and within a set of mutually recursive types (a strongly connected
/// component of the "field holds" graph) it may visit every member before it leaves.
/// The bound is therefore the heaviest path over the components, each weighing its
/// number of types. A plain chain weighs its length; a self-recursive type weighs one.
/// Counting a recursive chain as ending where it repeats would be unsound: types that
/// reach each other in a ring can be entered at one member and walked all the way
/// round.
pub(crate) fn nesting_bounds(roots: &[TypeRoot]) -> HashMap<String, usize> {
    // The graph: every reachable type once, and the types its fields hold.
    let mut index_of: HashMap<String, usize> = HashMap::new();
    let mut types: Vec<MessageDescriptor> = Vec::new();
    for root in roots {
        if !index_of.contains_key(root.message.full_name()) {
            index_of.insert(root.message.full_name().to_owned(), types.len());
            types.push(root.message.clone());
        }
    }
    let mut holds: Vec<Vec<usize>> = Vec::new();
    let mut next = 0;
    while next < types.len() {
        let mut inner_types = Vec::new();
        let message = types[next].clone();
        for field in message.fields() {
            if let Some(inner) = field.kind().as_message() {
                let index = match index_of.get(inner.full_name()) {
                    Some(index) => *index,
                    None => {
                        index_of.insert(inner.full_name().to_owned(), types.len());
                        types.push(inner.clone());
                        types.len() - 1
                    }
                };
                if !inner_types.contains(&index) {
                    inner_types.push(index);
                }
            }
        }
        holds.push(inner_types);
        next += 1;
    }

    // Tarjan's strongly connected components, with an explicit stack. Components are
    // completed sinks first, so every component a type holds is weighed before it.
    const UNSEEN: usize = usize::MAX;
    let count = types.len();
    let (mut order, mut low) = (vec![UNSEEN; count], vec![0; count]);
    let mut component = vec![UNSEEN; count];
    let (mut open, mut on_open) = (Vec::new(), vec![false; count]);
    let mut weight_of_component: Vec<usize> = Vec::new();
    let mut visited = 0;
    for start in 0..count {
        if order[start] != UNSEEN {
            continue;
        }
        let mut walk: Vec<(usize, usize)> = vec![(start, 0)];
        order[start] = visited;
        low[start] = visited;
        visited += 1;
        open.push(start);
        on_open[start] = true;
        while let Some(&(at, edge)) = walk.last() {
            if let Some(&inner) = holds[at].get(edge) {
                if let Some(top) = walk.last_mut() {
                    top.1 += 1;
                }
                if order[inner] == UNSEEN {
                    order[inner] = visited;
                    low[inner] = visited;
                    visited += 1;
                    open.push(inner);
                    on_open[inner] = true;
                    walk.push((inner, 0));
                } else if on_open[inner] {
                    low[at] = low[at].min(order[inner]);
                }
                continue;
            }
            walk.pop();
            if let Some(&(parent, _)) = walk.last() {
                low[parent] = low[parent].min(low[at]);
            }
            if low[at] == order[at] {
                let id = weight_of_component.len();
                let mut members = Vec::new();
                while let Some(member) = open.pop() {
                    on_open[member] = false;
                    component[member] = id;
                    members.push(member);
                    if member == at {
                        break;
                    }
                }
                let heaviest_held = members
                    .iter()
                    .flat_map(|member| &holds[*member])
                    .filter(|inner| component[**inner] != id)
                    .map(|inner| weight_of_component[component[*inner]])
                    .max()
                    .unwrap_or(0);
                weight_of_component.push(members.len() + heaviest_held);
            }
        }
    }
    index_of
        .into_iter()
        .map(|(name, index)| (name, weight_of_component[component[index]]))
        .collect()
}

/// A finding for every root whose types may nest deeper than [`MAX_TYPE_NESTING`];
/// true when there is none (and the rules may be checked).
pub(crate) fn check_nesting(findings: &mut Vec<Finding>, roots: &[TypeRoot]) -> bool {
    let bounds = nesting_bounds(roots);
    let mut shallow = true;
    for root in roots {
        let depth = bounds.get(root.message.full_name()).copied().unwrap_or(1);
        if depth > MAX_TYPE_NESTING {
            shallow = false;
            findings.push(Finding {
                step: root.step.clone(),
                path: root.path.clone(),
                message: format!(
                    "type {} nests message types {depth} deep (a field holding a message holding a message …, each set of types that hold each other counted by its size); at most {MAX_TYPE_NESTING} levels are accepted",
                    root.message.full_name()
                ),
            });
        }
    }
    shallow
}

/// The types reachable from `roots` that hold, at any depth, a type with a rule out of
/// bounds or unparsable (themselves included).
fn holders_of_unrunnable(roots: &[TypeRoot], unrunnable: &Unrunnable) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut held_by: HashMap<String, Vec<String>> = HashMap::new();
    for root in roots {
        for message in reachable(&root.message, &mut seen) {
            for field in message.fields() {
                if let Some(inner) = field.kind().as_message() {
                    held_by
                        .entry(inner.full_name().to_owned())
                        .or_default()
                        .push(message.full_name().to_owned());
                }
            }
        }
    }
    let mut holding: HashSet<String> = unrunnable
        .out_of_bounds
        .iter()
        .chain(unrunnable.unparsable.keys())
        .cloned()
        .collect();
    let mut queue: VecDeque<String> = holding.iter().cloned().collect();
    while let Some(name) = queue.pop_front() {
        for holder in held_by.get(&name).into_iter().flatten() {
            if holding.insert(holder.clone()) {
                queue.push_back(holder.clone());
            }
        }
    }
    holding
}

/// Validates a default instance of every type reachable from `roots` (except those
/// out of bounds), so rules that cannot run are findings now, not failures later.
pub(crate) fn check_usable(
    findings: &mut Vec<Finding>,
    validator: &Validator,
    roots: &[TypeRoot],
    unrunnable: &Unrunnable,
) {
    let holding_unrunnable = holders_of_unrunnable(roots, unrunnable);
    let mut seen = HashSet::new();
    for root in roots {
        for message in reachable(&root.message, &mut seen) {
            let name = message.full_name();
            // Validating a type builds the evaluators of every type it holds, parsing
            // their rules on this thread: never hand the validator a type that leads to
            // a rule out of bounds. Those rules are findings already.
            if unrunnable.out_of_bounds.contains(name)
                || (holding_unrunnable.contains(name) && !unrunnable.unparsable.contains_key(name))
            {
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
            // A CEL error quotes the expression, up to 4,096 characters, more than once.
            let problem = shortened(&problem, 600);
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

/// `text` cut to `limit` characters, marked when cut.
fn shortened(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!(
            "{} … ({} characters in all)",
            &text[..end],
            text.chars().count()
        ),
        None => text.to_owned(),
    }
}
