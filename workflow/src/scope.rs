//! What a running segment can read: the input and the responses of earlier steps.
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

/// The values rules and gates read, by root name.
///
/// Messages are shared, so the copy a gate takes to another thread
/// ([`Scope::subset`]) costs a reference count, not a deep clone of the data.
#[derive(Debug, Clone)]
pub struct Scope {
    roots: HashMap<String, Arc<DynamicMessage>>,
    /// Steps a gate skipped: in scope with their default message, but their response
    /// as a whole is absent to rules (copying it must not invent a `{}`).
    skipped: HashSet<String>,
}

impl Scope {
    /// A scope holding only the input.
    pub fn new(input: DynamicMessage) -> Self {
        Scope {
            roots: HashMap::from([(INPUT.to_owned(), Arc::new(input))]),
            skipped: HashSet::new(),
        }
    }

    /// Adds a step its gate skipped, with its output type's default message.
    pub fn insert_skipped(&mut self, name: &str, default: DynamicMessage) {
        self.roots.insert(name.to_owned(), Arc::new(default));
        self.skipped.insert(name.to_owned());
    }

    /// True when `root` is a step its gate skipped.
    pub fn is_skipped(&self, root: &str) -> bool {
        self.skipped.contains(root)
    }

    /// Adds a step's response (or, for a skipped step, its default message).
    pub fn insert_step(&mut self, name: &str, response: DynamicMessage) {
        self.roots.insert(name.to_owned(), Arc::new(response));
    }

    /// The message of one root, if it is in scope.
    pub fn get(&self, root: &str) -> Option<&DynamicMessage> {
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

    /// Every root and its message.
    pub fn roots(&self) -> impl Iterator<Item = (&str, &DynamicMessage)> {
        self.roots
            .iter()
            .map(|(name, message)| (name.as_str(), message.as_ref()))
    }

    /// Reads `root.fields...`; the path was verified, so a miss here means the scope
    /// drifted from the workflow.
    pub fn read(&self, root: &str, fields: &[String]) -> Result<Value, String> {
        let message = self
            .roots
            .get(root)
            .ok_or_else(|| format!("'{root}' is not in scope yet"))?;
        let mut current = DynamicMessage::clone(message);
        let Some((last, parents)) = fields.split_last() else {
            return Ok(Value::Message(current));
        };
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
