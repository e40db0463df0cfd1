//! Compiling an envelope in a test: the workflow, or the findings it must have, and
//! the assertion that one finding names a step, a path and what it says.

use serde_json::Value;

use crate::{CompiledWorkflow, Finding};

/// The workflow `envelope` compiles to as a new workflow
/// ([`CompiledWorkflow::compile_new`]); panics with the findings otherwise.
pub fn compile_new(envelope: &Value) -> CompiledWorkflow {
    CompiledWorkflow::compile_new(envelope).unwrap_or_else(|findings| panic!("{findings}"))
}

/// The findings of an envelope that must not compile as a job's snapshot
/// ([`CompiledWorkflow::compile`]).
pub fn findings(envelope: &Value) -> Vec<Finding> {
    match CompiledWorkflow::compile(envelope) {
        Ok(_) => panic!("the envelope should not compile"),
        Err(findings) => findings.0,
    }
}

/// The findings of an envelope that must not compile as a new workflow
/// ([`CompiledWorkflow::compile_new`]).
pub fn new_findings(envelope: &Value) -> Vec<Finding> {
    match CompiledWorkflow::compile_new(envelope) {
        Ok(_) => panic!("the envelope should not be accepted as new"),
        Err(findings) => findings.0,
    }
}

/// Asserts one of `all` is about `step` at `path` and mentions every one of
/// `needles`, listing them all when none is.
pub fn assert_finding(all: &[Finding], step: Option<&str>, path: &str, needles: &[&str]) {
    assert!(
        all.iter().any(|f| f.step.as_deref() == step
            && f.path == path
            && needles.iter().all(|n| f.message.contains(n))),
        "no finding for step {step:?} at {path} mentioning {needles:?}; got:\n{}",
        all.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
