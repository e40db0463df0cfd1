//! What a running segment can read: the input and the responses of earlier steps;
//! a map step's responses as one list (in element order); and, in a map step's
//! rules, the element a call is for (`item`) and its position (`index`).
//!
//! A skipped step is in scope with its output type's default message, so a later
//! reference to its fields does not fail: a plain scalar reads its default, repeated
//! and map fields read empty, and a field that tracks presence is unset, so a rule
//! copying it does nothing (see [`crate::rules`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// The root every workflow can read: the submitted input.
pub const INPUT: &str = "input";
/// In a map step's rules: the element of the list the call is for.
pub const ITEM: &str = "item";
/// In a map step's rules: the element's position in the list, from 0.
pub const INDEX: &str = "index";

/// The values rules and gates read, by root name.
///
/// Messages are shared, so the copy a gate takes to another thread
/// ([`Scope::subset`]) costs a reference count, not a deep clone of the data.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Each root: a message (the input, a step's response), a list of messages (a
    /// map step's responses) or, for `item` and `index`, any value.
    roots: HashMap<String, Arc<Value>>,
    /// Steps a gate skipped: in scope with their default message, but their response
    /// as a whole is absent to rules (copying it must not invent a `{}`).
    skipped: HashSet<String>,
}

impl Scope {
    /// A scope holding only the input.
    pub fn new(input: DynamicMessage) -> Self {
        Scope {
            roots: HashMap::from([(INPUT.to_owned(), Arc::new(Value::Message(input)))]),
            skipped: HashSet::new(),
        }
    }

    /// Adds a step its gate skipped, with its output type's default message.
    pub fn insert_skipped(&mut self, name: &str, default: DynamicMessage) {
        self.roots
            .insert(name.to_owned(), Arc::new(Value::Message(default)));
        self.skipped.insert(name.to_owned());
    }

    /// Adds a map step its gate skipped: an empty list, absent to rules as a whole.
    pub fn insert_skipped_list(&mut self, name: &str) {
        self.roots
            .insert(name.to_owned(), Arc::new(Value::List(Vec::new())));
        self.skipped.insert(name.to_owned());
    }

    /// True when `root` is a step its gate skipped.
    pub fn is_skipped(&self, root: &str) -> bool {
        self.skipped.contains(root)
    }

    /// Adds a step's response (or, for a skipped step, its default message).
    pub fn insert_step(&mut self, name: &str, response: DynamicMessage) {
        self.roots
            .insert(name.to_owned(), Arc::new(Value::Message(response)));
    }

    /// Adds a map step's responses, in element order.
    pub fn insert_list(&mut self, name: &str, responses: Vec<DynamicMessage>) {
        let list = responses.into_iter().map(Value::Message).collect();
        self.roots
            .insert(name.to_owned(), Arc::new(Value::List(list)));
    }

    /// This scope with `item` and `index` bound, for one call of a map step.
    pub fn with_item(&self, item: Value, index: usize) -> Scope {
        let mut scope = self.clone();
        scope.roots.insert(ITEM.to_owned(), Arc::new(item));
        // A list this engine can hold has fewer than 2^63 elements.
        let index = i64::try_from(index).unwrap_or(i64::MAX);
        scope
            .roots
            .insert(INDEX.to_owned(), Arc::new(Value::I64(index)));
        scope
    }

    /// The message of one root, if it is in scope and a message.
    pub fn get(&self, root: &str) -> Option<&DynamicMessage> {
        self.roots.get(root).and_then(|value| value.as_message())
    }

    /// The value of one root (a message, a list, or `item`'s and `index`'s value).
    pub fn get_value(&self, root: &str) -> Option<&Value> {
        self.roots.get(root).map(Arc::as_ref)
    }

    /// A scope holding only `names` (those in scope), for work that must own what it
    /// reads, such as a gate evaluated on another thread.
    pub fn subset(&self, names: &[String]) -> Scope {
        Scope {
            roots: names
                .iter()
                .filter_map(|name| Some((name.clone(), self.roots.get(name)?.clone())))
                .collect(),
            skipped: self.skipped.clone(),
        }
    }

    /// Every root that is a message, and its message.
    pub fn roots(&self) -> impl Iterator<Item = (&str, &DynamicMessage)> {
        self.roots
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.as_message()?)))
    }

    /// Reads `root.fields...`; the path was verified, so a miss here means the scope
    /// drifted from the workflow.
    pub fn read(&self, root: &str, fields: &[String]) -> Result<Value, String> {
        let value = self
            .roots
            .get(root)
            .ok_or_else(|| format!("'{root}' is not in scope yet"))?;
        let Some((last, parents)) = fields.split_last() else {
            return Ok(Value::clone(value));
        };
        let mut current = value
            .as_message()
            .ok_or_else(|| format!("'{root}' is not a message: its fields cannot be read"))?
            .clone();
        for name in parents {
            let value = current
                .get_field_by_name(name)
                .ok_or_else(|| {
                    format!("{} has no field '{name}'", current.descriptor().full_name())
                })?
                .into_owned();
            current = match value {
                Value::Message(inner) => inner,
                _ => return Err(format!("'{name}' is not a message")),
            };
        }
        current
            .get_field_by_name(last)
            .map(|value| value.into_owned())
            .ok_or_else(|| format!("{} has no field '{last}'", current.descriptor().full_name()))
    }
}
