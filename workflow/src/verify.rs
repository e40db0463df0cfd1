//! Static verification: every rule, gate and output mapping is checked against the
//! types before anything runs, and every problem is reported, not just the first.
//!
//! A rule's target must exist on the request type with a type the source converts
//! into (a literal exactly, without loss: see [`crate::rules::literal_value`]; a map
//! into a map with the same key and value types); a source must be rooted at `input`
//! or at an *ancestor* of the step (one it runs after, directly or through others:
//! in a chain, an earlier step; a later step is a forward reference, a step of a
//! parallel branch may not have run yet, an unknown root is a typo); a `when` gate
//! must compile as CEL within the bounds of [`crate::gate::analyze`] and read only
//! those same roots. Output rules may read every step. (A new workflow is held to more: see
//! [`crate::CompiledWorkflow::strict_findings`].)
//!
//! Presence is a run-time matter, not a finding: a rule whose source turns out unset
//! (or whose path passes through an unset message) does nothing (see
//! [`crate::rules`]), where a gate reading through an unset message fails.

use prost_reflect::{Kind, MessageDescriptor};

use crate::compile::graph::StepGraph;
use crate::finding::Finding;
use crate::gate::Gate;
use crate::rules::{Cardinality, Rule, RuleOp, Shape, Source, check_rule, source_shape};
use crate::scope::{INDEX, INPUT, ITEM};
use crate::spec::{OutputSpec, SleepSpec, StepSpec};

/// The type a sleep step's `until` names.
pub(crate) const TIMESTAMP: &str = "google.protobuf.Timestamp";

/// Verifies every step and the output, and answers, per step, the kind of a map
/// step's elements (`None` for other steps, or when it did not resolve).
pub(crate) fn verify(
    findings: &mut Vec<Finding>,
    input: Option<&MessageDescriptor>,
    steps: &[StepSpec],
    graph: &StepGraph,
    output: Option<&OutputSpec>,
) -> Vec<Option<Kind>> {
    let mut roots = Roots {
        input,
        steps,
        graph,
        element: None,
    };
    let mut elements = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        let mut find = |path: &str, message: String| {
            findings.push(Finding {
                step: Some(step.name.clone()),
                path: path.to_owned(),
                message,
            });
        };
        roots.element = None;
        if let Some(map) = &step.map {
            match roots.element_kind(&map.root, &map.fields, index) {
                Ok(kind) => roots.element = kind,
                Err(reason) => find(&map.path, format!("'forEach': {reason}")),
            }
            if let Some(shadow) = [ITEM, INDEX]
                .into_iter()
                .find(|name| roots.readable_step(name, index))
            {
                find(
                    &map.path,
                    format!(
                        "a map step's rules read the element as `item` and its position as `index`, but an ancestor step is named '{shadow}': rename that step"
                    ),
                );
            }
        }
        let request = step.request_type.clone();
        for (rule, path) in &step.rules {
            if let Err(reason) = roots.check_rule(rule, request.as_ref(), index) {
                find(path, format!("rule '{}': {reason}", rule.text));
            }
        }
        // A rate limit's expressions are computed per call: a map step's per element.
        if let Some(limit) = &step.rate_limit {
            let at = |field: &str| format!("$.steps[{index}].rateLimit.{field}");
            for (field, gate) in [("key", &limit.key), ("units", &limit.units)] {
                if let Some(gate) = gate
                    && let Err(reason) =
                        roots.check_cel(&format!("rateLimit `{field}`"), &gate.source, index)
                {
                    find(&at(field), reason);
                }
            }
        }
        // A map step's gate is decided once, for the whole step: not per element.
        let element = roots.element.take();
        if let Some((source, path)) = &step.when
            && let Err(reason) = roots.check_gate(source, index)
        {
            find(path, reason);
        }
        if let Some(SleepSpec::Until { root, fields, path }) = &step.sleep
            && let Err(reason) = roots.check_timestamp(root, fields, index)
        {
            find(path, format!("'until': {reason}"));
        }
        if let Some(event) = &step.event
            && let Err(reason) = roots.check_cel("`eventKey`", &event.key.0, index)
        {
            find(&event.key.1, reason);
        }
        elements.push(step.map.as_ref().and(element));
    }
    if let Some(output) = output {
        for (rule, path) in &output.rules {
            if let Err(reason) = roots.check_rule(rule, output.message.as_ref(), steps.len()) {
                findings.push(Finding {
                    step: None,
                    path: path.clone(),
                    message: format!("output rule '{}': {reason}", rule.text),
                });
            }
        }
    } else if let Some(last) = steps.last().filter(|s| s.map.is_some()) {
        findings.push(Finding {
            step: Some(last.name.clone()),
            path: "$.output".into(),
            message: format!(
                "the last step '{}' is a map step, whose response is a list: declare an 'output' (a message with a repeated field, `results = {}`)",
                last.name, last.name
            ),
        });
    }
    elements
}

struct Roots<'a> {
    input: Option<&'a MessageDescriptor>,
    steps: &'a [StepSpec],
    graph: &'a StepGraph,
    /// While a map step's rules are checked: the kind of its elements (`item`).
    element: Option<Kind>,
}

impl Roots<'_> {
    /// True when `name` is a step that step `index` may read.
    fn readable_step(&self, name: &str, index: usize) -> bool {
        self.steps
            .iter()
            .position(|s| s.name == name)
            .is_some_and(|j| self.graph.is_ancestor(j, index))
    }

    /// The shape of `root` as seen from step `index` (`None` when it did not resolve),
    /// or why `root` cannot be read there: a message, or a map step's list of them
    /// (and in a map step's rules, `item` and `index`). `index` past the last step is
    /// the output, which reads every step.
    fn root_type(&self, root: &str, index: usize) -> Result<Option<Shape>, String> {
        let single = |message: MessageDescriptor| Shape {
            kind: Kind::Message(message),
            cardinality: Cardinality::Single,
        };
        if root == INPUT {
            return Ok(self.input.cloned().map(single));
        }
        if let Some(element) = &self.element {
            if root == ITEM {
                return Ok(Some(Shape {
                    kind: element.clone(),
                    cardinality: Cardinality::Single,
                }));
            }
            if root == INDEX {
                return Ok(Some(Shape {
                    kind: Kind::Int64,
                    cardinality: Cardinality::Single,
                }));
            }
        }
        let readable = |j: usize| index >= self.steps.len() || self.graph.is_ancestor(j, index);
        match self.steps.iter().position(|s| s.name == root) {
            Some(j) if readable(j) => Ok(self.steps[j].response_type.clone().map(|message| {
                let mut shape = single(message);
                if self.steps[j].map.is_some() {
                    shape.cardinality = Cardinality::Repeated;
                }
                shape
            })),
            Some(j) if j == index => Err(format!(
                "'{root}' is this step itself: read only `input` and {}",
                self.readable_kind()
            )),
            Some(j) if self.graph.chain => Err(format!(
                "forward reference to step '{root}', which runs later (step {} of {}): read only `input` and earlier steps",
                j + 1,
                self.steps.len()
            )),
            Some(_) => Err(format!(
                "step '{}' reads step '{root}', which is not one of its ancestors: '{root}' may not have run yet when '{}' starts; add '{root}' to its 'after' (or to the 'after' of a step it waits for)",
                self.steps[index].name, self.steps[index].name
            )),
            None => {
                let readable: Vec<&str> = self
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| readable(*j))
                    .map(|(_, s)| s.name.as_str())
                    .collect();
                Err(format!(
                    "unknown scope '{root}': expected `input`{}",
                    if readable.is_empty() {
                        String::new()
                    } else {
                        format!(" or {} ({})", self.readable_one(), readable.join(", "))
                    }
                ))
            }
        }
    }

    /// What a step may read besides `input`, in the words that fit the workflow.
    fn readable_kind(&self) -> &'static str {
        if self.graph.chain {
            "earlier steps"
        } else {
            "its ancestors (the steps it runs after)"
        }
    }

    fn readable_one(&self) -> &'static str {
        if self.graph.chain {
            "an earlier step"
        } else {
            "an ancestor"
        }
    }

    fn check_rule(
        &self,
        rule: &Rule,
        target: Option<&MessageDescriptor>,
        index: usize,
    ) -> Result<(), String> {
        let source_shape = match &rule.op {
            RuleOp::Assign(Source::Path { root, fields })
            | RuleOp::Append(Source::Path { root, fields }) => {
                match self.root_type(root, index)? {
                    Some(root_type) => Some(
                        path_shape(root_type, root, fields)
                            .map_err(|e| format!("source {root}: {e}"))?,
                    ),
                    // The root's type did not resolve; that finding is reported elsewhere.
                    None => return Ok(()),
                }
            }
            _ => None,
        };
        match target {
            Some(target) => check_rule(rule, target, source_shape.as_ref()),
            None => Ok(()),
        }
    }

    /// The kind of the elements `forEach` names (`root.fields`), seen from map step
    /// `index`: a repeated field, or a whole map step's list. `None` when a type did
    /// not resolve (reported elsewhere).
    fn element_kind(
        &self,
        root: &str,
        fields: &[String],
        index: usize,
    ) -> Result<Option<Kind>, String> {
        let Some(root_shape) = self.root_type(root, index)? else {
            return Ok(None);
        };
        let shape = path_shape(root_shape, root, fields)?;
        match shape.cardinality {
            Cardinality::Repeated => Ok(Some(shape.kind)),
            _ => Err(format!(
                "'{}' is {}, not a list: name a repeated field",
                std::iter::once(root)
                    .chain(fields.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join("."),
                shape.describe()
            )),
        }
    }

    fn check_gate(&self, source: &str, index: usize) -> Result<(), String> {
        self.check_cel("`when`", source, index)
    }

    /// A CEL expression of step `index` (called `label` in the finding) compiles
    /// within the bounds and reads only what the step may read.
    fn check_cel(&self, label: &str, source: &str, index: usize) -> Result<(), String> {
        let gate = Gate::compile(source).map_err(|e| format!("{label} {e}"))?;
        let mut problems = Vec::new();
        for variable in gate.variables() {
            if let Err(reason) = self.root_type(&variable, index) {
                problems.push(reason);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("{label} {}", problems.join("; ")))
        }
    }

    /// `root.fields`, seen from step `index`, is one `google.protobuf.Timestamp` (a
    /// sleep step's `until`).
    fn check_timestamp(&self, root: &str, fields: &[String], index: usize) -> Result<(), String> {
        let Some(root_shape) = self.root_type(root, index)? else {
            return Ok(());
        };
        let shape = path_shape(root_shape, root, fields)?;
        match (&shape.kind, shape.cardinality) {
            (Kind::Message(message), Cardinality::Single) if message.full_name() == TIMESTAMP => {
                Ok(())
            }
            _ => Err(format!(
                "'{}' is {}, not a {TIMESTAMP}",
                std::iter::once(root)
                    .chain(fields.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join("."),
                shape.describe()
            )),
        }
    }
}

/// The shape of `root.fields` when `root` has shape `root_shape`: fields are read
/// only below a single message.
fn path_shape(root_shape: Shape, root: &str, fields: &[String]) -> Result<Shape, String> {
    if fields.is_empty() {
        return Ok(root_shape);
    }
    match (&root_shape.kind, root_shape.cardinality) {
        (Kind::Message(message), Cardinality::Single) => source_shape(message, fields),
        _ => Err(format!(
            "'{root}' is {}: it has no fields to read (copy it whole, or read it in a `when` gate)",
            root_shape.describe()
        )),
    }
}
