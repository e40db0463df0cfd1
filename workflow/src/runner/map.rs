//! A map step while its segment runs: its elements, which of them are done (this
//! segment or an earlier one), how many of its calls are in flight, and what the step
//! ends as.

use prost_reflect::{DynamicMessage, Value};

use crate::checkpoint::{Checkpoint, ItemCheckpoint, ItemOutcome, map_checkpoint};
use crate::compile::{CompiledStep, OnItemFailure, decode_json, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::scope::Scope;

/// The most elements a map step may fan out over unless the runner is told
/// otherwise (`[workflow].max_map_items`).
pub const DEFAULT_MAX_MAP_ITEMS: usize = 10_000;

/// The most bytes of proto3 JSON a map step's checkpoint (its list of responses,
/// kept in the job row) may hold: past it the step fails, not retried, naming both
/// numbers, rather than the database refusing the row (jsonb ends at 256 MiB).
pub const MAX_MAP_CHECKPOINT_BYTES: usize = 64 * 1024 * 1024;

/// How many elements map step `step` fans out over, read from `scope` (the input and
/// the responses of the steps it runs after): `None` when it is not a map step or its
/// list cannot be read (yet).
pub fn list_length(step: &CompiledStep, scope: &Scope) -> Option<usize> {
    let map = step.map.as_ref()?;
    match scope.read(&map.root, &map.fields) {
        Ok(Value::List(values)) => Some(values.len()),
        _ => None,
    }
}

/// One element's state.
enum Element {
    /// Not called yet (or its call failed in a way a retry may fix).
    Waiting,
    /// Its call is in flight.
    Calling,
    /// Answered: its response, and the response as proto3 JSON.
    Answered(DynamicMessage, serde_json::Value),
    /// Failed for good; kept with `onItemFailure: "collect"`.
    Failed(String),
}

/// A map step with calls still to make or in flight.
pub(super) struct Mapping<'w> {
    pub(super) step: &'w CompiledStep,
    values: Vec<Value>,
    elements: Vec<Element>,
    /// Elements before this one were all started (or done) once.
    cursor: usize,
    in_flight: usize,
    /// With `onItemFailure: "fail"`: the failure of the lowest element that failed,
    /// and how many failed.
    failure: Option<(usize, StepFailure)>,
    failures: usize,
    /// Bytes of JSON of the responses so far (bounded by [`MAX_MAP_CHECKPOINT_BYTES`]).
    bytes: usize,
}

impl<'w> Mapping<'w> {
    /// The map step `step` starting: its list read from `scope`, at most `max_items`
    /// elements, those `prior` holds (stored by an earlier segment) done already.
    pub(super) fn start(
        step: &'w CompiledStep,
        scope: &Scope,
        prior: &[ItemCheckpoint],
        max_items: usize,
    ) -> Result<Self, StepFailure> {
        let fail = |kind, message: String| StepFailure::at(&step.name, kind, message);
        let Some(map) = &step.map else {
            return Err(fail(FailureKind::Workflow, "not a map step".into()));
        };
        let listed = format!("{}.{}", map.root, map.fields.join("."));
        let listed = listed.trim_end_matches('.');
        let values = match scope.read(&map.root, &map.fields) {
            Ok(Value::List(values)) => values,
            Ok(_) => {
                return Err(fail(
                    FailureKind::Mapping,
                    format!("'forEach' read {listed}, which is not a list"),
                ));
            }
            Err(e) => {
                return Err(fail(
                    FailureKind::Mapping,
                    format!("'forEach' could not read {listed}: {e}"),
                ));
            }
        };
        if values.len() > max_items {
            return Err(fail(
                FailureKind::Workflow,
                format!(
                    "'forEach' gave {} elements ({listed}), more than the limit of {max_items} ([workflow].max_map_items): split the list, or raise the limit",
                    values.len()
                ),
            ));
        }
        let mut elements: Vec<Element> = values.iter().map(|_| Element::Waiting).collect();
        for stored in prior.iter().filter(|item| item.step == step.name) {
            let Some(slot) = elements.get_mut(stored.index) else {
                return Err(fail(
                    FailureKind::Workflow,
                    format!(
                        "element {} is stored but the list has {} elements (the stored job no longer matches its input)",
                        stored.index,
                        values.len()
                    ),
                ));
            };
            *slot = match &stored.outcome {
                ItemOutcome::Response(json) => Element::Answered(
                    decode_json(&step.output_type(), json).map_err(|e| {
                        fail(
                            FailureKind::Workflow,
                            format!(
                                "the stored response of element {} does not decode: {e} (the stored job no longer matches its workflow)",
                                stored.index
                            ),
                        )
                    })?,
                    json.clone(),
                ),
                ItemOutcome::Failed(error) => Element::Failed(error.clone()),
            };
        }
        Ok(Mapping {
            step,
            values,
            elements,
            cursor: 0,
            in_flight: 0,
            failure: None,
            failures: 0,
            bytes: 0,
        })
    }

    /// The next element to call, when one may start now: not done, under the step's
    /// `maxParallel`, and no element failed for good in `fail` mode.
    pub(super) fn next_element(&mut self) -> Option<(usize, Value)> {
        let limit = self.step.map.as_ref().map_or(1, |m| m.max_parallel.max(1));
        if self.failure.is_some() || self.in_flight >= limit {
            return None;
        }
        while self.cursor < self.elements.len() {
            let index = self.cursor;
            self.cursor += 1;
            if matches!(self.elements[index], Element::Waiting) {
                self.elements[index] = Element::Calling;
                self.in_flight += 1;
                return Some((index, self.values[index].clone()));
            }
        }
        None
    }

    /// Gives back element `index` that [`Mapping::next_element`] answered but was not
    /// called (its flow limit held it back): it is the next one again.
    pub(super) fn put_back(&mut self, index: usize) {
        if matches!(self.elements[index], Element::Calling) {
            self.elements[index] = Element::Waiting;
            self.in_flight -= 1;
            self.cursor = self.cursor.min(index);
        }
    }

    /// The elements not ended yet (no stored outcome), in order, with their values:
    /// a child step keeps a child started for the first `maxParallel` of them.
    pub(super) fn unended(&self) -> impl Iterator<Item = (usize, &Value)> {
        self.elements
            .iter()
            .zip(&self.values)
            .enumerate()
            .filter(|(_, (element, _))| matches!(element, Element::Waiting))
            .map(|(index, (_, value))| (index, value))
    }

    /// The first stored element that failed, with its error: under `onItemFailure:
    /// "fail"` it fails a child step (a failed call is not stored, but a child that
    /// did not complete is).
    pub(super) fn stored_failure(&self) -> Option<(usize, &str)> {
        self.elements
            .iter()
            .enumerate()
            .find_map(|(index, element)| match element {
                Element::Failed(error) => Some((index, error.as_str())),
                _ => None,
            })
    }

    /// True when the next call would be one of several of this segment in flight.
    pub(super) fn has_more(&self) -> bool {
        let limit = self.step.map.as_ref().map_or(1, |m| m.max_parallel.max(1));
        self.failure.is_none()
            && self.in_flight < limit
            && self.elements[self.cursor..]
                .iter()
                .any(|e| matches!(e, Element::Waiting))
    }

    /// Element `index` answered `response`: its outcome to store, or (a response
    /// with no proto3 JSON form) the element's failure, which [`Mapping::failed`]
    /// then takes.
    pub(super) fn answered(
        &mut self,
        index: usize,
        response: DynamicMessage,
    ) -> Result<ItemOutcome, StepFailure> {
        let json = encode_json(&response).map_err(|e| {
            StepFailure::at(
                &self.step.name,
                FailureKind::Workflow,
                format!("the response of element {index} cannot be stored: {e}"),
            )
        })?;
        self.in_flight -= 1;
        // Past the checkpoint's bound the step can never end well: it fails once its
        // calls in flight end, as an element failed for good does, whatever
        // `onItemFailure` says.
        self.bytes += serde_json::to_vec(&json).map_or(0, |b| b.len());
        if self.bytes > MAX_MAP_CHECKPOINT_BYTES && self.failure.is_none() {
            self.failures += 1;
            self.failure = Some((
                index,
                StepFailure::at(
                    &self.step.name,
                    FailureKind::Workflow,
                    format!(
                        "its responses passed {MAX_MAP_CHECKPOINT_BYTES} bytes of JSON, the most a map step's checkpoint may hold: map over fewer elements, or answer less per element"
                    ),
                ),
            ));
        }
        self.elements[index] = Element::Answered(response, json.clone());
        Ok(ItemOutcome::Response(json))
    }

    /// Element `index` failed in a way a retry may fix: it stays to be called.
    pub(super) fn interrupted(&mut self, index: usize) {
        self.in_flight -= 1;
        self.elements[index] = Element::Waiting;
        self.cursor = self.cursor.min(index);
    }

    /// Element `index` failed for good: with `collect`, the outcome to store; with
    /// `fail`, nothing (the step fails once its calls in flight end).
    pub(super) fn failed(&mut self, index: usize, failure: StepFailure) -> Option<ItemOutcome> {
        self.in_flight -= 1;
        let collect = self
            .step
            .map
            .as_ref()
            .is_some_and(|m| m.on_item_failure == OnItemFailure::Collect);
        if collect {
            let error = failure.to_string();
            self.elements[index] = Element::Failed(error.clone());
            return Some(ItemOutcome::Failed(error));
        }
        self.elements[index] = Element::Waiting;
        self.failures += 1;
        if self
            .failure
            .as_ref()
            .is_none_or(|(first, _)| index < *first)
        {
            self.failure = Some((index, failure));
        }
        None
    }

    /// True when an element failed for good in `fail` mode: the step will fail, and
    /// the segment starts nothing more.
    pub(super) fn failing(&self) -> bool {
        self.failure.is_some()
    }

    /// True when the step can end: nothing in flight, and every element done, or an
    /// element failed for good in `fail` mode.
    pub(super) fn ended(&self) -> bool {
        self.in_flight == 0
            && (self.failure.is_some()
                || self
                    .elements
                    .iter()
                    .all(|e| matches!(e, Element::Answered(..) | Element::Failed(_))))
    }

    /// How the step ended: its checkpoint and its list of responses (element order,
    /// failed elements left out), or the failure of its lowest failed element with
    /// the count of failed elements.
    pub(super) fn end(self) -> Result<(Checkpoint, Vec<DynamicMessage>), StepFailure> {
        if let Some((index, first)) = self.failure {
            let message = format!(
                "element {index} of {} failed ({} failed in all): {}",
                self.elements.len(),
                self.failures,
                first.message
            );
            return Err(StepFailure { message, ..first });
        }
        let mut items = Vec::with_capacity(self.elements.len());
        let mut list = Vec::with_capacity(self.elements.len());
        let mut failed = Vec::new();
        for (index, element) in self.elements.into_iter().enumerate() {
            match element {
                Element::Answered(response, json) => {
                    items.push(json);
                    list.push(response);
                }
                Element::Failed(error) => failed.push((index, error)),
                Element::Waiting | Element::Calling => {
                    return Err(StepFailure::at(
                        &self.step.name,
                        FailureKind::Workflow,
                        format!("element {index} ended without an answer"),
                    ));
                }
            }
        }
        let response = map_checkpoint(items, &failed);
        let bytes = serde_json::to_vec(&response).map_or(usize::MAX, |b| b.len());
        if bytes > MAX_MAP_CHECKPOINT_BYTES {
            return Err(StepFailure::at(
                &self.step.name,
                FailureKind::Workflow,
                format!(
                    "its list of {} responses is {bytes} bytes of JSON, more than the {MAX_MAP_CHECKPOINT_BYTES} a map step's checkpoint may hold: map over fewer elements, or answer less per element",
                    list.len()
                ),
            ));
        }
        let checkpoint = Checkpoint {
            name: self.step.name.clone(),
            skipped: false,
            response: Some(response),
        };
        Ok((checkpoint, list))
    }
}
