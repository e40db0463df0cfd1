//! The steps as a graph: each step's dependencies (its `after`, or the step declared
//! before it), checked for unknown names and cycles, and each step's ancestors: the
//! steps that always end before it starts, whose responses its rules and gate may
//! read.
//!
//! A step without `after` depends on the step before it, so an envelope written
//! before `after` existed is a chain and means what it always meant; `"after": []`
//! starts with the job.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::compile::limits::MAX_STEPS;
use crate::spec::AfterSpec;
use crate::suggest::did_you_mean;

/// The most steps a workflow runs at once unless its `maxParallel` says otherwise.
pub const DEFAULT_MAX_PARALLEL: usize = 8;
/// The largest `maxParallel` a workflow (or a map step) may declare.
pub const MAX_PARALLEL_CEILING: usize = 256;

/// Reads a step's `after`: `None` when absent (the step depends on the one before
/// it), else the names it lists.
pub(super) fn read_after(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    step: Option<&str>,
    path: &str,
) -> Option<AfterSpec> {
    let value = object.get("after")?;
    let path = format!("{path}.after");
    let Some(items) = value.as_array() else {
        draft.find(
            step,
            &path,
            format!(
                "'after' must be an array of step names (`[]` to start with the job), not {}",
                json_kind(value)
            ),
        );
        return Some(AfterSpec {
            names: Vec::new(),
            path,
        });
    };
    if items.len() > MAX_STEPS {
        draft.find(
            step,
            &path,
            format!(
                "'after' lists {} names, more than the limit of {MAX_STEPS} steps",
                items.len()
            ),
        );
        return Some(AfterSpec {
            names: Vec::new(),
            path,
        });
    }
    let mut names = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(name) if names.iter().any(|n: &String| n == name) => draft.find(
                step,
                format!("{path}[{i}]"),
                format!("'after' names step '{name}' twice: list each step once"),
            ),
            Some(name) => names.push(name.to_owned()),
            None => draft.find(
                step,
                format!("{path}[{i}]"),
                format!("'after' lists step names, not {}", json_kind(item)),
            ),
        }
    }
    Some(AfterSpec { names, path })
}

/// Reads a `maxParallel` (the workflow's, or a map step's): 1 to
/// [`MAX_PARALLEL_CEILING`], [`DEFAULT_MAX_PARALLEL`] when absent.
pub(super) fn read_max_parallel(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    step: Option<&str>,
    path: &str,
) -> usize {
    let Some(value) = object.get("maxParallel") else {
        return DEFAULT_MAX_PARALLEL;
    };
    match value.as_u64() {
        Some(n) if (1..=MAX_PARALLEL_CEILING as u64).contains(&n) => {
            // Bounded by the ceiling just above, so it fits.
            usize::try_from(n).unwrap_or(DEFAULT_MAX_PARALLEL)
        }
        _ => {
            draft.find(
                step,
                format!("{path}.maxParallel"),
                format!(
                    "'maxParallel' must be a whole number from 1 to {MAX_PARALLEL_CEILING}, not {value}"
                ),
            );
            DEFAULT_MAX_PARALLEL
        }
    }
}

/// The dependency graph of a workflow's steps, by index in declaration order.
pub(crate) struct StepGraph {
    /// Each step's direct dependencies, ascending.
    pub deps: Vec<Vec<usize>>,
    /// `ancestors[i][j]`: step `j` always ends before step `i` starts.
    ancestors: Vec<Vec<bool>>,
    /// True when no step declares `after` (every step follows the one before it).
    pub chain: bool,
}

impl StepGraph {
    /// Resolves every step's dependencies and finds unknown names and cycles. A step
    /// caught in a cycle is given every other step as an ancestor, so the cycle is
    /// reported once and not again as reads of steps that do not run first.
    pub(super) fn build(
        draft: &mut Draft<'_>,
        names: &[&str],
        after: &[Option<&AfterSpec>],
    ) -> StepGraph {
        let count = names.len();
        let chain = after.iter().all(Option::is_none);
        let mut deps = Vec::with_capacity(count);
        for (i, declared) in after.iter().enumerate() {
            let Some(spec) = declared else {
                deps.push(if i == 0 { Vec::new() } else { vec![i - 1] });
                continue;
            };
            let mut own = Vec::with_capacity(spec.names.len());
            for (k, name) in spec.names.iter().enumerate() {
                let path = format!("{}[{k}]", spec.path);
                match names.iter().position(|n| n == name) {
                    Some(j) if j == i => draft.find(
                        Some(names[i]),
                        path,
                        format!(
                            "step '{name}' cannot run after itself: remove it from its 'after'"
                        ),
                    ),
                    Some(j) => own.push(j),
                    None => {
                        let hint = did_you_mean(name, names.iter().copied())
                            .map(|s| format!(" (did you mean '{s}'?)"))
                            .unwrap_or_default();
                        draft.find(
                            Some(names[i]),
                            path,
                            format!("'after' names unknown step '{name}'{hint}: name steps of this workflow"),
                        );
                    }
                }
            }
            own.sort_unstable();
            deps.push(own);
        }
        let order = topological_order(&deps);
        let mut ancestors = vec![vec![false; count]; count];
        for &i in &order {
            for &d in &deps[i] {
                ancestors[i][d] = true;
                let (inherited, own) = if d < i {
                    let (low, high) = ancestors.split_at_mut(i);
                    (&low[d], &mut high[0])
                } else {
                    let (low, high) = ancestors.split_at_mut(d);
                    (&high[0], &mut low[i])
                };
                for (mine, theirs) in own.iter_mut().zip(inherited) {
                    *mine |= *theirs;
                }
            }
        }
        if order.len() < count {
            let ordered: HashSet<usize> = order.iter().copied().collect();
            let stuck: Vec<usize> = (0..count).filter(|i| !ordered.contains(i)).collect();
            if let Some(cycle) = find_cycle(&deps, &stuck) {
                let round: Vec<&str> = cycle.iter().map(|&i| names[i]).collect();
                let first = cycle[0];
                let path = after[first]
                    .map_or_else(|| format!("$.steps[{first}]"), |spec| spec.path.clone());
                draft.find(
                    Some(names[first]),
                    path,
                    format!(
                        "the steps wait for each other in a cycle ({} -> {}): no step of it could ever start; remove one of these 'after' names",
                        round.join(" -> "),
                        names[first]
                    ),
                );
            }
            for i in stuck {
                ancestors[i] = (0..count).map(|j| j != i).collect();
            }
        }
        StepGraph {
            deps,
            ancestors,
            chain,
        }
    }

    /// True when step `j` always ends before step `i` starts.
    pub fn is_ancestor(&self, j: usize, of: usize) -> bool {
        self.ancestors
            .get(of)
            .and_then(|row| row.get(j))
            .copied()
            .unwrap_or(false)
    }

    /// The ancestors of step `i`, ascending.
    pub fn ancestors_of(&self, i: usize) -> Vec<usize> {
        self.ancestors.get(i).map_or_else(Vec::new, |row| {
            row.iter()
                .enumerate()
                .filter_map(|(j, is)| is.then_some(j))
                .collect()
        })
    }
}

/// Kahn's order over `deps` (ties by declaration order); leaves out the steps on or
/// behind a cycle.
fn topological_order(deps: &[Vec<usize>]) -> Vec<usize> {
    let count = deps.len();
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); count];
    for (i, own) in deps.iter().enumerate() {
        for &d in own {
            dependents[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..count).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(count);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &next in &dependents[i] {
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.insert(next);
            }
        }
    }
    order
}

/// One cycle among the `stuck` steps, in the order they would run: each waits for
/// the one listed before it, and the first for the last.
fn find_cycle(deps: &[Vec<usize>], stuck: &[usize]) -> Option<Vec<usize>> {
    let stuck_set: HashSet<usize> = stuck.iter().copied().collect();
    // Walk dependencies from a stuck step, staying among stuck steps (each has at
    // least one stuck dependency, else Kahn would have ordered it): a walk of more
    // steps than there are must revisit one, and the loop from there is a cycle.
    let start = *stuck.first()?;
    let mut path = vec![start];
    let mut seen_at = std::collections::HashMap::from([(start, 0usize)]);
    let mut current = start;
    loop {
        let next = *deps[current].iter().find(|d| stuck_set.contains(d))?;
        if let Some(&at) = seen_at.get(&next) {
            let mut cycle: Vec<usize> = path[at..].to_vec();
            // Written in the order the steps would run: each after the one before.
            cycle.reverse();
            return Some(cycle);
        }
        seen_at.insert(next, path.len());
        path.push(next);
        current = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(after: &[Option<&[&str]>]) -> (StepGraph, Vec<crate::finding::Finding>) {
        let names: Vec<String> = (0..after.len()).map(|i| format!("s{i}")).collect();
        let specs: Vec<Option<AfterSpec>> = after
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.map(|names| AfterSpec {
                    names: names.iter().map(|n| (*n).to_owned()).collect(),
                    path: format!("$.steps[{i}].after"),
                })
            })
            .collect();
        let mut findings = Vec::new();
        let mut draft = Draft {
            findings: &mut findings,
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let specs: Vec<Option<&AfterSpec>> = specs.iter().map(Option::as_ref).collect();
        let graph = StepGraph::build(&mut draft, &refs, &specs);
        (graph, findings)
    }

    #[test]
    fn steps_without_after_form_a_chain() {
        let (g, findings) = graph(&[None, None, None]);
        assert!(findings.is_empty());
        assert!(g.chain);
        assert_eq!(g.deps, vec![vec![], vec![0], vec![1]]);
        assert!(g.is_ancestor(0, 2) && g.is_ancestor(1, 2) && !g.is_ancestor(2, 1));
    }

    #[test]
    fn a_diamond_has_the_ancestors_it_declares_and_no_others() {
        let (g, findings) = graph(&[None, Some(&["s0"]), Some(&["s0"]), Some(&["s1", "s2"])]);
        assert!(findings.is_empty(), "{findings:?}");
        assert!(!g.chain);
        assert!(!g.is_ancestor(1, 2) && !g.is_ancestor(2, 1));
        assert_eq!(g.ancestors_of(3), vec![0, 1, 2]);
    }

    #[test]
    fn a_cycle_is_one_finding_naming_its_steps() {
        let (_, findings) = graph(&[Some(&["s2"]), Some(&["s0"]), Some(&["s1"])]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let message = &findings[0].message;
        assert!(message.contains("cycle"), "{message}");
        for name in ["s0", "s1", "s2"] {
            assert!(message.contains(name), "{message}");
        }
    }

    #[test]
    fn a_step_may_wait_for_a_step_declared_after_it() {
        let (g, findings) = graph(&[Some(&["s1"]), Some(&[])]);
        assert!(findings.is_empty(), "{findings:?}");
        assert!(g.is_ancestor(1, 0));
    }
}
