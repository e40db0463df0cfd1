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

use prost_reflect::MessageDescriptor;

use crate::compile::graph::StepGraph;
use crate::finding::Finding;
use crate::gate::Gate;
use crate::rules::{Rule, RuleOp, Source, check_rule, source_shape};
use crate::scope::INPUT;
use crate::spec::{OutputSpec, StepSpec};

pub(crate) fn verify(
    findings: &mut Vec<Finding>,
    input: Option<&MessageDescriptor>,
    steps: &[StepSpec],
    graph: &StepGraph,
    output: Option<&OutputSpec>,
) {
    let roots = Roots {
        input,
        steps,
        graph,
    };
    for (index, step) in steps.iter().enumerate() {
        let request = step.request_type.clone();
        for (rule, path) in &step.rules {
            if let Err(reason) = roots.check_rule(rule, request.as_ref(), index) {
                findings.push(Finding {
                    step: Some(step.name.clone()),
                    path: path.clone(),
                    message: format!("rule '{}': {reason}", rule.text),
                });
            }
        }
        if let Some((source, path)) = &step.when
            && let Err(reason) = roots.check_gate(source, index)
        {
            findings.push(Finding {
                step: Some(step.name.clone()),
                path: path.clone(),
                message: reason,
            });
        }
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
    }
}

struct Roots<'a> {
    input: Option<&'a MessageDescriptor>,
    steps: &'a [StepSpec],
    graph: &'a StepGraph,
}

impl Roots<'_> {
    /// The type of `root` as seen from step `index` (`None` when it did not resolve),
    /// or why `root` cannot be read there. `index` past the last step is the output,
    /// which reads every step.
    fn root_type(&self, root: &str, index: usize) -> Result<Option<MessageDescriptor>, String> {
        if root == INPUT {
            return Ok(self.input.cloned());
        }
        let readable = |j: usize| index >= self.steps.len() || self.graph.is_ancestor(j, index);
        match self.steps.iter().position(|s| s.name == root) {
            Some(j) if readable(j) => Ok(self.steps[j].response_type.clone()),
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
                        source_shape(&root_type, fields)
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

    fn check_gate(&self, source: &str, index: usize) -> Result<(), String> {
        let gate = Gate::compile(source).map_err(|e| format!("`when` {e}"))?;
        let mut problems = Vec::new();
        for variable in gate.variables() {
            if let Err(reason) = self.root_type(&variable, index) {
                problems.push(reason);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("`when` {}", problems.join("; ")))
        }
    }
}
