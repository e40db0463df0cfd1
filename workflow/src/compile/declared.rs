//! The `buf.validate` rules a workflow declares on the types it reads: within the CEL
//! bounds, and runnable where the engine runs them (see [`crate::ruleset`]).

use prost_protovalidate::Validator;
use prost_reflect::MessageDescriptor;

use crate::finding::Finding;
use crate::ruleset::{self, TypeRoot};
use crate::spec::StepSpec;

/// The `buf.validate` rules of every type the workflow reads stay within the CEL
/// bounds, and those the engine runs (the input's, and the responses of `validate`
/// steps) can run at all (see [`crate::ruleset`]).
pub(super) fn check_declared_rules(
    findings: &mut Vec<Finding>,
    validator: &Validator,
    input_type: Option<&MessageDescriptor>,
    steps: &[StepSpec],
) {
    let mut read = Vec::new();
    let mut validated = Vec::new();
    if let Some(input_type) = input_type {
        let root = || TypeRoot {
            message: input_type.clone(),
            step: None,
            path: "$.inputType".into(),
        };
        read.push(root());
        validated.push(root());
    }
    for (i, spec) in steps.iter().enumerate() {
        let Some(response_type) = &spec.response_type else {
            continue;
        };
        let path = if spec.method.is_some() {
            format!("$.steps[{i}].method")
        } else {
            format!("$.steps[{i}].outputType")
        };
        let root = |message: MessageDescriptor| TypeRoot {
            message,
            step: Some(spec.name.clone()),
            path: path.clone(),
        };
        read.push(root(response_type.clone()));
        if let Some(request_type) = &spec.request_type {
            read.push(root(request_type.clone()));
        }
        if spec.validate {
            validated.push(root(response_type.clone()));
        }
    }
    // The validator recurses over the types: a chain too deep for it is refused
    // before it is built.
    if !ruleset::check_nesting(findings, &read) {
        return;
    }
    let unrunnable = ruleset::check_bounds(findings, &read);
    ruleset::check_usable(findings, validator, &validated, &unrunnable);
}
