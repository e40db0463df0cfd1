//! `when` gates: a CEL boolean over `input` and the earlier steps, bounded in size,
//! in the data it reads and in time.
//!
//! # Presence
//!
//! Messages enter CEL as maps keyed by proto field name, following protobuf presence:
//!
//! - a field that tracks presence (a singular message field, a proto3 `optional`
//!   scalar, a oneof member, a proto2 `optional` field) is **absent** from the map
//!   when it is not set, so `has(input.meta)` is false for an unset `meta`, and only
//!   the selected member of a oneof is there;
//! - a proto3 scalar without `optional` (implicit presence) is always there, reading
//!   its default when unset, so `input.text == ''` works on an empty input;
//! - repeated and map fields are always there, possibly empty, so
//!   `size(tokenize.ids) > 0` works whether or not the tokenizer returned ids;
//! - the wrapper well-known types (`google.protobuf.Int64Value`, ...) read as their
//!   inner value when set.
//!
//! An unset message is never expanded, so recursive types (`message Node { Node
//! next = 1; }`) convert in time proportional to what was actually sent. Read a
//! nested field behind `has()`: `has(input.meta) && input.meta.id != ''`.
//!
//! Only the roots the expression reads ([`Gate::variables`]) are converted.
//!
//! # Bounds
//!
//! The `cel` crate has no cost limit and no cancellation: a comprehension runs to its
//! end on whatever thread started it. So gates are bounded three times over:
//!
//! 1. **Statically**, at compile time ([`analyze`]): at most
//!    [`MAX_EXPRESSION_CHARS`] characters, [`MAX_EXPRESSION_NODES`] AST nodes,
//!    [`MAX_EXPRESSION_DEPTH`] levels of nesting (the parser and the evaluator recurse
//!    per level) and [`MAX_COMPREHENSION_DEPTH`] nested comprehensions (`all`, `exists`,
//!    `exists_one`, `map`, `filter`); no message construction (`Foo{a: 1}`), which
//!    the evaluator cannot do (it panics). The same bounds apply to the CEL rules of
//!    `buf.validate` options, which the same evaluator runs.
//! 2. **By cost and memory**, before evaluating: converting the roots read is capped
//!    at [`MAX_MESSAGE_DEPTH`] nested messages, [`MAX_CONVERTED_VALUES`] values and
//!    [`MAX_CONVERTED_BYTES`] bytes of strings and bytes. Then two estimates
//!    ([`Shape::cost`], [`Shape::memory`]) must stay within their bounds:
//!    - **cost**: `(values converted + literal list elements) ^ cost exponent × AST
//!      nodes` at most [`MAX_COST`]. The cost exponent sums, along the deepest chain
//!      of nested comprehensions, 1 for each `all`, `exists`, `exists_one` and 2 for
//!      each `map` and `filter`: the `cel` evaluator builds their result by copying
//!      the accumulated list on every iteration, so one `map` over S values does
//!      about S² work, and a `map` inside an `all` about S³. The estimate is an
//!      upper bound on loop iterations times the work of one iteration, not an exact
//!      count: comprehensions cannot iterate over more elements than the data and
//!      the literals hold, and each iteration evaluates at most the whole expression.
//!    - **memory**: `(bytes of strings and bytes converted + values converted ×
//!      the size of one CEL value) × (`+` operators + 1)` at most
//!      [`MAX_EVALUATION_BYTES`]. Concatenation is the one operator that builds values
//!      larger than its operands: `input.name + input.name` doubles what was read,
//!      and a tree of 128 such leaves multiplies it by 128 with no comprehension and
//!      few nodes. Strings built per element inside a `map` are not counted
//!      separately; the cost bound and the time bound cover them.
//! 3. **In time**, at run time ([`Gate::evaluate_within`]): evaluation runs on a
//!    dedicated, detached thread ([`crate::offload`]), never on an async worker nor
//!    on tokio's blocking pool, and the step waits at most the smaller of
//!    [`GATE_TIME_LIMIT`] and what is left of the segment (waiting for a free
//!    evaluation thread included). A gate that does not answer in time fails the
//!    step; its thread finishes in the background, its work bounded by the cost
//!    check, without delaying the runtime's shutdown.

mod convert;

use std::sync::Arc;
use std::time::Duration;

use cel::common::ast::{EntryExpr, Expr, LiteralValue, MapExpr, StructExpr};
use cel::objects::Value as CelValue;
use cel::{Context, IdedExpr, Program};
use prost_reflect::Value;

use crate::typecheck::Ty;

use crate::offload::{self, OffloadError};
use crate::scope::Scope;
use convert::Budget;

/// Longest accepted CEL expression (a `when` gate or a `buf.validate` rule), in characters.
pub const MAX_EXPRESSION_CHARS: usize = 4_096;
/// Most AST nodes a CEL expression may have.
pub const MAX_EXPRESSION_NODES: usize = 512;
/// Deepest nesting of CEL expressions (AST levels). The evaluator recurses once per
/// level with large frames: a chain of 250 `+` overflows a 2 MiB thread stack.
pub const MAX_EXPRESSION_DEPTH: usize = 48;
/// Most comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) nested in
/// one another.
pub const MAX_COMPREHENSION_DEPTH: usize = 2;
pub use convert::{MAX_CONVERTED_BYTES, MAX_CONVERTED_VALUES, MAX_MESSAGE_DEPTH};
/// Largest estimated cost a CEL expression may have (see the module docs).
pub const MAX_COST: u128 = 1_000_000_000;
/// Largest estimated memory a gate evaluation may build, in bytes (see
/// [`Shape::memory`]).
pub const MAX_EVALUATION_BYTES: u128 = 64 * 1024 * 1024;
/// What [`Shape::memory`] charges per converted value: the size of one CEL value,
/// which a list concatenation copies.
const VALUE_BYTES: u128 = std::mem::size_of::<CelValue>() as u128;
/// The CEL name of the `+` operator.
const ADD: &str = "_+_";
/// Longest a `when` gate may take at run time (less when the segment has less left).
pub const GATE_TIME_LIMIT: Duration = Duration::from_secs(1);

/// The static shape of a CEL expression: what its bounds and its cost derive from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// AST nodes.
    pub nodes: usize,
    /// Deepest nesting of comprehensions.
    pub comprehension_depth: usize,
    /// The exponent of the cost estimate: along the deepest chain of nested
    /// comprehensions, 1 per `all`/`exists`/`exists_one`, 2 per `map`/`filter`
    /// (quadratic in the `cel` evaluator, see the module docs).
    pub cost_exponent: usize,
    /// Elements of every list literal, summed.
    pub literal_elements: usize,
    /// `+` operators (the only ones that build a value larger than their operands),
    /// those the `map` and `filter` macros expand to included.
    pub additions: usize,
}

impl Shape {
    /// The estimated cost of evaluating over `values` converted values:
    /// `(values + literal elements) ^ cost exponent × nodes`, saturating.
    pub fn cost(&self, values: u64) -> u128 {
        let base = (u128::from(values) + self.literal_elements as u128).max(1);
        // An exponent above u32::MAX cannot pass analyze(); saturate anyway.
        let exponent = u32::try_from(self.cost_exponent).unwrap_or(u32::MAX);
        base.saturating_pow(exponent)
            .saturating_mul(self.nodes as u128)
    }

    /// The estimated memory, in bytes, an evaluation can build from `bytes` bytes of
    /// strings and bytes and `values` values converted: `(bytes + values × the size
    /// of one CEL value) × (additions + 1)`, saturating. Each `+` can at most hold a
    /// copy of everything read (a balanced tree of `k` concatenations of the whole
    /// input builds `k + 1` times its size).
    pub fn memory(&self, bytes: u64, values: u64) -> u128 {
        let read = u128::from(bytes).saturating_add(u128::from(values).saturating_mul(VALUE_BYTES));
        read.saturating_mul(self.additions as u128 + 1)
    }
}

/// Parses a CEL expression and checks the static bounds (see the module docs). The
/// error reads after the expression's name: "is not valid CEL: ...", "has 600 AST
/// nodes, more than the limit of 512: ...".
pub fn analyze(source: &str) -> Result<(Program, Shape), String> {
    let chars = source.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(format!(
            "is {chars} characters long, more than the limit of {MAX_EXPRESSION_CHARS}: keep conditions short and move logic into a step"
        ));
    }
    let program = parse(source)?;
    let mut shape = Shape::default();
    walk(program.expression(), 1, Nesting::default(), &mut shape)?;
    let cost = shape.cost(0);
    if cost > MAX_COST {
        return Err(format!(
            "could cost about {cost} operations on its literals alone (list elements ^ cost exponent {} × {} nodes; map and filter count twice in the exponent), more than the limit of {MAX_COST}: use shorter literal lists or fewer nested comprehensions",
            shape.cost_exponent, shape.nodes
        ));
    }
    Ok((program, shape))
}

/// Stack for the CEL parser's thread. The parser recurses once per nesting level
/// (`((((1))))`, `!!!!true`) before its own recursion limit is checked, and a few
/// thousand levels fit in [`MAX_EXPRESSION_CHARS`]: on a default 2 MiB thread that
/// overflows the stack and aborts the process. The memory is reserved, not used,
/// unless an expression is that deep.
const PARSER_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Parses on a thread with a stack large enough for any expression within
/// [`MAX_EXPRESSION_CHARS`]; the parser's recursion limit then refuses the deep ones.
fn parse(source: &str) -> Result<Program, String> {
    let owned = source.to_owned();
    std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSER_STACK_BYTES)
        .spawn(move || Program::compile(&owned).map_err(|e| e.to_string()))
        .map_err(|e| format!("could not be parsed: no parser thread: {e}"))?
        .join()
        .map_err(|_| "could not be parsed: the CEL parser panicked".to_owned())?
        .map_err(|e| format!("is not valid CEL: {e}"))
}

/// The comprehensions enclosing an AST node.
#[derive(Clone, Copy, Default)]
struct Nesting {
    /// How many.
    depth: usize,
    /// Their summed cost weights (1 for `all`/`exists`/`exists_one`, 2 for
    /// `map`/`filter`).
    exponent: usize,
}

/// The cost weight of a comprehension: 2 when it accumulates a list (`map` and
/// `filter` start from `[]` and append on every iteration, which the evaluator does
/// by copying the list), 1 when it accumulates a bool (`all`, `exists`) or a count
/// (`exists_one`). Anything else the parser might produce counts as a list, so the
/// estimate errs high.
fn cost_weight(accu_init: &IdedExpr) -> usize {
    match &accu_init.expr {
        Expr::Literal(LiteralValue::Boolean(_) | LiteralValue::Int(_)) => 1,
        _ => 2,
    }
}

/// Counts nodes, additions, comprehension depth, the cost exponent and literal
/// elements; refuses what the evaluator cannot run. Stops as soon as the node or
/// nesting limit is passed, so its own recursion is bounded by
/// [`MAX_EXPRESSION_DEPTH`].
fn walk(
    expr: &IdedExpr,
    level: usize,
    comprehensions: Nesting,
    shape: &mut Shape,
) -> Result<(), String> {
    shape.nodes += 1;
    if shape.nodes > MAX_EXPRESSION_NODES {
        return Err(format!(
            "has more than {MAX_EXPRESSION_NODES} AST nodes (the limit): simplify it or move logic into a step"
        ));
    }
    if level > MAX_EXPRESSION_DEPTH {
        return Err(format!(
            "nests expressions more than {MAX_EXPRESSION_DEPTH} deep (the limit): split long chains of operators or move logic into a step"
        ));
    }
    let level = level + 1;
    match &expr.expr {
        Expr::Ident(_) | Expr::Literal(_) => Ok(()),
        Expr::Unspecified => Err("has an unspecified expression the evaluator cannot run".into()),
        Expr::Struct(StructExpr { type_name, .. }) => Err(format!(
            "constructs a message (`{type_name}{{...}}`), which CEL here cannot evaluate: compare fields instead"
        )),
        Expr::Call(call) => {
            if call.func_name == ADD {
                shape.additions += 1;
            }
            if let Some(target) = &call.target {
                walk(target, level, comprehensions, shape)?;
            }
            call.args
                .iter()
                .try_for_each(|arg| walk(arg, level, comprehensions, shape))
        }
        Expr::Comprehension(comprehension) => {
            let comprehensions = Nesting {
                depth: comprehensions.depth + 1,
                exponent: comprehensions.exponent + cost_weight(&comprehension.accu_init),
            };
            shape.comprehension_depth = shape.comprehension_depth.max(comprehensions.depth);
            shape.cost_exponent = shape.cost_exponent.max(comprehensions.exponent);
            if comprehensions.depth > MAX_COMPREHENSION_DEPTH {
                return Err(format!(
                    "nests {} comprehensions (all, exists, exists_one, map, filter), more than the limit of {MAX_COMPREHENSION_DEPTH}: flatten the condition or compute it in a step",
                    comprehensions.depth
                ));
            }
            [
                &comprehension.iter_range,
                &comprehension.accu_init,
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ]
            .into_iter()
            .try_for_each(|inner| walk(inner, level, comprehensions, shape))
        }
        Expr::List(list) => {
            shape.literal_elements += list.elements.len();
            list.elements
                .iter()
                .try_for_each(|element| walk(element, level, comprehensions, shape))
        }
        Expr::Map(MapExpr { entries }) => entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                walk(&e.key, level, comprehensions, shape)?;
                walk(&e.value, level, comprehensions, shape)
            }
            EntryExpr::StructField(f) => walk(&f.value, level, comprehensions, shape),
        }),
        Expr::Select(select) => walk(&select.operand, level, comprehensions, shape),
    }
}

/// A compiled `when` expression, within the static bounds.
#[derive(Clone)]
pub struct Gate {
    /// The expression as written.
    pub source: String,
    program: Arc<Program>,
    shape: Shape,
    roots: Arc<[String]>,
    /// What the expression is called in errors: "`when` gate", "`eventKey`".
    label: &'static str,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("source", &self.source)
            .finish()
    }
}

impl Gate {
    /// Compiles the expression and checks its static bounds; the error reads after
    /// "`when` " (see [`analyze`]).
    pub fn compile(source: &str) -> Result<Gate, String> {
        Gate::compile_as(source, "`when` gate")
    }

    /// [`Gate::compile`] for another bounded CEL expression of a step (an event
    /// step's `eventKey`), called `label` in errors.
    pub fn compile_as(source: &str, label: &'static str) -> Result<Gate, String> {
        let (program, shape) = analyze(source)?;
        let mut roots = Vec::new();
        free_variables(program.expression(), &mut Vec::new(), &mut roots);
        Ok(Gate {
            source: source.to_owned(),
            program: Arc::new(program),
            shape,
            roots: roots.into(),
            label,
        })
    }

    /// The free variables the expression reads (its scope roots), in order of first
    /// use. Variables bound by comprehension macros (`ids.exists(i, i > 5)`) are not
    /// roots and are left out.
    pub fn variables(&self) -> Vec<String> {
        self.roots.to_vec()
    }

    /// The expression's static shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Checks the expression against the types of its roots (see
    /// [`crate::typecheck`]): fields that do not exist, operands of the wrong type, a
    /// result that cannot be a boolean. `root_type` answers `None` for a root that is
    /// unknown or did not resolve.
    pub fn check_types(&self, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
        crate::typecheck::check_gate(self.program.expression(), root_type)
    }

    /// [`Gate::check_types`] for an expression that must be a whole number (a rate
    /// limit's units).
    pub fn check_int_type(&self, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
        crate::typecheck::check_int(self.program.expression(), root_type)
    }

    /// [`Gate::check_types`] for an expression that must be a string (an event key).
    pub fn check_string_type(&self, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
        crate::typecheck::check_string(self.program.expression(), root_type)
    }

    /// Evaluates the gate on the calling thread: converts the roots it reads (within
    /// the conversion bounds), refuses when the estimated cost is above [`MAX_COST`]
    /// or the estimated memory above [`MAX_EVALUATION_BYTES`], then runs it. Anything but a boolean is an error. From async code use
    /// [`Gate::evaluate_within`], which keeps this off the async threads.
    pub fn evaluate(&self, scope: &Scope) -> Result<bool, String> {
        match self.evaluate_value(scope)? {
            CelValue::Bool(open) => Ok(open),
            other => Err(format!("`when` must evaluate to a bool, got {other:?}")),
        }
    }

    /// Evaluates an expression that must be a string (an event key) on the calling
    /// thread, within the bounds [`Gate::evaluate`] keeps.
    pub fn evaluate_string(&self, scope: &Scope) -> Result<String, String> {
        match self.evaluate_value(scope)? {
            CelValue::String(text) => Ok(text.to_string()),
            other => Err(format!(
                "{} must evaluate to a string, got {other:?}",
                self.label
            )),
        }
    }

    /// Evaluates an expression that must be a whole number of 0 or more (a rate
    /// limit's `units`) on the calling thread, within the bounds [`Gate::evaluate`]
    /// keeps.
    pub fn evaluate_count(&self, scope: &Scope) -> Result<u64, String> {
        match self.evaluate_value(scope)? {
            CelValue::Int(n) => {
                u64::try_from(n).map_err(|_| format!("{} must be 0 or more, got {n}", self.label))
            }
            CelValue::UInt(n) => Ok(n),
            other => Err(format!(
                "{} must evaluate to a whole number, got {other:?}",
                self.label
            )),
        }
    }

    /// [`Gate::evaluate_count`] on a dedicated evaluation thread, waiting at most
    /// `limit` as [`Gate::evaluate_within`] does.
    pub async fn evaluate_count_within(
        &self,
        scope: &Scope,
        limit: Duration,
    ) -> Result<u64, String> {
        let gate = self.clone();
        let roots = scope.subset(&self.roots);
        self.offloaded(limit, move || gate.evaluate_count(&roots))
            .await
    }

    /// [`Gate::evaluate_string`] on a dedicated evaluation thread, waiting at most
    /// `limit` as [`Gate::evaluate_within`] does.
    pub async fn evaluate_string_within(
        &self,
        scope: &Scope,
        limit: Duration,
    ) -> Result<String, String> {
        let gate = self.clone();
        let roots = scope.subset(&self.roots);
        self.offloaded(limit, move || gate.evaluate_string(&roots))
            .await
    }

    /// The converted roots' bounds, then the evaluation.
    fn evaluate_value(&self, scope: &Scope) -> Result<CelValue, String> {
        let label = self.label;
        let mut budget = Budget::default();
        let mut context = Context::default();
        for name in self.roots.iter() {
            let converted = match scope.get_value(name) {
                Some(Value::Message(message)) => budget.message(message, 1)?,
                // A map step's responses (a list of messages), or a map step's `item`
                // and `index`.
                Some(other) => budget.value(other, 0)?,
                None => continue,
            };
            context.add_variable_from_value(name.clone(), converted);
        }
        let cost = self.shape.cost(budget.values);
        if cost > MAX_COST {
            return Err(format!(
                "the {label} could cost about {cost} operations over the {} values it reads ((values + literal list elements) ^ cost exponent {} × {} nodes; map and filter count twice in the exponent), more than the limit of {MAX_COST}",
                budget.values, self.shape.cost_exponent, self.shape.nodes
            ));
        }
        let memory = self.shape.memory(budget.bytes, budget.values);
        if memory > MAX_EVALUATION_BYTES {
            return Err(format!(
                "the {label} could build about {memory} bytes from the {} bytes and {} values it reads ((bytes + values × {VALUE_BYTES}) × ({} `+` operators + 1)), more than the limit of {MAX_EVALUATION_BYTES} bytes (gate::MAX_EVALUATION_BYTES): concatenate less, or read less of the data",
                budget.bytes, budget.values, self.shape.additions
            ));
        }
        self.program
            .execute(&context)
            .map_err(|e| format!("the {label} could not be evaluated: {e}"))
    }

    /// [`Gate::evaluate`] on a dedicated evaluation thread ([`crate::offload`]),
    /// waiting at most `limit`, the wait for a free evaluation thread included; the
    /// async thread that awaits it stays free. On timeout the evaluation is abandoned,
    /// not stopped (the evaluator cannot be interrupted): the cost check bounds what
    /// it can still do, and it never delays the runtime's shutdown.
    pub async fn evaluate_within(&self, scope: &Scope, limit: Duration) -> Result<bool, String> {
        let gate = self.clone();
        let roots = scope.subset(&self.roots);
        self.offloaded(limit, move || gate.evaluate(&roots)).await
    }

    /// Runs `evaluate` on an evaluation thread within `limit`.
    async fn offloaded<T: Send + 'static>(
        &self,
        limit: Duration,
        evaluate: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        match offload::run_within(limit, evaluate).await {
            Ok(result) => result,
            Err(OffloadError::TimedOut { limit }) => Err(format!(
                "the {} did not finish within {} ms",
                self.label,
                limit.as_millis()
            )),
            Err(e) => Err(format!(
                "the {} failed while evaluating: it {e}",
                self.label
            )),
        }
    }
}

fn free_variables<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>, free: &mut Vec<String>) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(&name.as_str()) && !free.contains(name) {
                free.push(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_variables(target, bound, free);
            }
            for arg in &call.args {
                free_variables(arg, bound, free);
            }
        }
        Expr::Comprehension(comprehension) => {
            free_variables(&comprehension.iter_range, bound, free);
            free_variables(&comprehension.accu_init, bound, free);
            let depth = bound.len();
            bound.push(&comprehension.iter_var);
            bound.extend(comprehension.iter_var2.as_deref());
            bound.push(&comprehension.accu_var);
            for inner in [
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                free_variables(inner, bound, free);
            }
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for element in &list.elements {
                free_variables(element, bound, free);
            }
        }
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        free_variables(&e.key, bound, free);
                        free_variables(&e.value, bound, free);
                    }
                    EntryExpr::StructField(f) => free_variables(&f.value, bound, free),
                }
            }
        }
        Expr::Select(select) => free_variables(&select.operand, bound, free),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use prost_reflect::{DynamicMessage, ReflectMessage, Value};

    use super::*;
    use crate::schema::compile_proto_pool;
    use crate::scope::Scope;

    const PROTO: &str = r#"
        syntax = "proto3";
        package t;
        import "google/protobuf/wrappers.proto";
        message Meta { string id = 1; }
        message M {
          string text = 1;
          Meta meta = 2;
          optional int32 maybe = 3;
          oneof choice { string a = 4; int64 b = 5; }
          repeated int64 ids = 6;
          map<string, string> tags = 7;
          int32 plain = 8;
          google.protobuf.Int64Value wrapped = 9;
        }
    "#;

    fn message(set: impl FnOnce(&mut DynamicMessage)) -> Scope {
        let pool = compile_proto_pool("t.proto", PROTO).unwrap();
        let mut m = DynamicMessage::new(pool.get_message_by_name("t.M").unwrap());
        set(&mut m);
        Scope::new(m)
    }

    fn eval(source: &str, scope: &Scope) -> Result<bool, String> {
        Gate::compile(source).unwrap().evaluate(scope)
    }

    #[test]
    fn variables_are_the_roots_read() {
        let gate = Gate::compile("size(tokenize.ids) > 0 && input.text != ''").unwrap();
        assert_eq!(gate.variables(), ["tokenize", "input"]);
    }

    #[test]
    fn comprehension_variables_are_not_roots() {
        let gate = Gate::compile("tokenize.ids.exists(i, i > 5)").unwrap();
        assert_eq!(gate.variables(), ["tokenize"]);
    }

    #[test]
    fn unset_presence_fields_are_absent_and_implicit_scalars_read_defaults() {
        let empty = message(|_| {});
        for (gate, expected) in [
            ("has(input.meta)", false),
            ("has(input.maybe)", false),
            ("has(input.a) || has(input.b)", false),
            ("has(input.wrapped)", false),
            ("input.text == '' && input.plain == 0", true),
            ("size(input.ids) == 0 && size(input.tags) == 0", true),
        ] {
            assert_eq!(eval(gate, &empty), Ok(expected), "{gate}");
        }
        // Reading through an unset message without `has()` is an error, not a default.
        let err = eval("input.meta.id == ''", &empty).unwrap_err();
        assert!(err.contains("could not be evaluated"), "{err}");
        let set = message(|m| {
            let meta = m.descriptor().get_field_by_name("meta").unwrap();
            let mut inner = DynamicMessage::new(meta.kind().as_message().unwrap().clone());
            inner.set_field_by_name("id", Value::String("m1".into()));
            m.set_field(&meta, Value::Message(inner));
            m.set_field_by_name("maybe", Value::I32(0));
            m.set_field_by_name("b", Value::I64(7));
            let wrapped = m.descriptor().get_field_by_name("wrapped").unwrap();
            let mut w = DynamicMessage::new(wrapped.kind().as_message().unwrap().clone());
            w.set_field_by_name("value", Value::I64(42));
            m.set_field(&wrapped, Value::Message(w));
        });
        for (gate, expected) in [
            ("has(input.meta) && input.meta.id == 'm1'", true),
            ("has(input.maybe) && input.maybe == 0", true),
            ("!has(input.a) && has(input.b) && input.b == 7", true),
            ("input.wrapped == 42", true),
        ] {
            assert_eq!(eval(gate, &set), Ok(expected), "{gate}");
        }
    }

    #[test]
    fn only_the_roots_read_are_converted() {
        let mut scope = message(|m| {
            m.set_field_by_name("ids", Value::List(vec![Value::I64(1); 10]));
        });
        let huge = DynamicMessage::new(scope.get("input").unwrap().descriptor());
        let mut huge = huge;
        huge.set_field_by_name(
            "ids",
            Value::List(vec![Value::I64(1); MAX_CONVERTED_VALUES as usize + 10]),
        );
        scope.insert_step("big", huge);
        assert_eq!(eval("size(input.ids) == 10", &scope), Ok(true));
        let err = eval("size(big.ids) > 0", &scope).unwrap_err();
        assert!(err.contains("more than 1000000 values"), "{err}");
    }

    #[test]
    fn map_and_filter_weigh_twice_in_the_cost_exponent_and_nesting_multiplies() {
        for (source, exponent) in [
            ("input.text == ''", 0),
            ("input.ids.all(x, x > 0)", 1),
            ("input.ids.exists(x, x > 0)", 1),
            ("input.ids.exists_one(x, x > 0)", 1),
            ("size(input.ids.map(x, x)) > 0", 2),
            ("size(input.ids.map(x, x > 0, x)) > 0", 2),
            ("size(input.ids.filter(x, x > 0)) > 0", 2),
            ("input.ids.all(a, size(input.ids.map(b, a + b)) > 0)", 3),
            ("size(input.ids.map(a, input.ids.map(b, a + b))) > 0", 4),
            // Side by side is the larger, not the sum.
            (
                "size(input.ids.map(x, x)) > 0 && input.ids.all(x, x > 0)",
                2,
            ),
        ] {
            let shape = Gate::compile(source).unwrap().shape();
            assert_eq!(shape.cost_exponent, exponent, "{source}");
        }
        let map = Gate::compile("size(input.ids.map(x, x)) > 0")
            .unwrap()
            .shape();
        // The map's own `[x]` is a literal element too.
        let base = 1_000 + map.literal_elements as u128;
        assert_eq!(map.cost(1_000), base * base * map.nodes as u128);
    }

    #[test]
    fn a_map_over_a_long_literal_is_refused_at_compile_time() {
        // 200 literal elements: 200^4 × nodes is past the bound, 200^2 × nodes is not.
        let list = format!("[{}]", vec!["1"; 100].join(","));
        let err = Gate::compile(&format!("size({list}.map(a, {list}.map(b, b))) > 0")).unwrap_err();
        assert!(err.contains("cost exponent 4"), "{err}");
        // The same shape with `all` is linear per level and passes.
        assert!(Gate::compile(&format!("{list}.all(a, {list}.all(b, b > 0))")).is_ok());
    }

    #[test]
    fn the_memory_estimate_multiplies_what_is_read_by_the_concatenations() {
        let shape = Gate::compile("size(input.text + input.text + input.text) > 0")
            .unwrap()
            .shape();
        assert_eq!(shape.additions, 2);
        assert_eq!(shape.memory(1_000, 0), 3_000);
        assert_eq!(shape.memory(0, 10), 3 * 10 * VALUE_BYTES);
        // The `+` a map expands to counts as well: it builds a list.
        let map = Gate::compile("size(input.ids.map(x, x)) > 0")
            .unwrap()
            .shape();
        assert_eq!(map.additions, 1);
    }

    #[test]
    fn concatenating_a_large_read_is_refused_before_evaluating() {
        let scope = message(|m| {
            m.set_field_by_name("text", Value::String("x".repeat(1024 * 1024)));
        });
        // A balanced tree of concatenations, `leaves` reads of the text.
        fn tree(leaves: usize) -> String {
            if leaves == 1 {
                return "input.text".to_owned();
            }
            format!("({} + {})", tree(leaves / 2), tree(leaves / 2))
        }
        // 1 MiB read: about 32 MiB estimated passes, about 128 MiB does not.
        assert_eq!(eval(&format!("size({}) > 0", tree(32)), &scope), Ok(true));
        let started = std::time::Instant::now();
        let err = eval(&format!("size({}) > 0", tree(128)), &scope).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(
            err.contains("127 `+` operators") && err.contains("MAX_EVALUATION_BYTES"),
            "{err}"
        );
    }

    #[test]
    fn struct_expressions_and_deep_comprehensions_are_refused() {
        let err = Gate::compile("t.Meta{id: 'x'} == input.meta").unwrap_err();
        assert!(err.contains("constructs a message"), "{err}");
        let err = Gate::compile("[1].all(a, [1].all(b, [1].all(c, a + b + c > 0)))").unwrap_err();
        assert!(err.contains("more than the limit of 2"), "{err}");
        assert!(Gate::compile("[1].all(a, [1].all(b, a + b > 0))").is_ok());
        // `||` chains parse balanced, so this is wide rather than deep.
        let wide = vec!["1 > 0"; 200].join(" || ");
        let err = Gate::compile(&wide).unwrap_err();
        assert!(err.contains("AST nodes"), "{err}");
        let err = Gate::compile(&format!("'{}' == ''", "x".repeat(5000))).unwrap_err();
        assert!(err.contains("limit of 4096"), "{err}");
    }

    #[test]
    fn deeply_nested_expressions_are_refused_without_overflowing_the_stack() {
        // Each of these overflowed a default thread stack, in the parser or in the
        // evaluator, and aborted the process.
        let parens = format!("{}1{} > 0", "(".repeat(2040), ")".repeat(2040));
        let err = Gate::compile(&parens).unwrap_err();
        assert!(err.contains("Recursion limit"), "{err}");
        let ternaries = format!("{}true", "true?true:".repeat(400));
        assert!(Gate::compile(&ternaries).is_err());
        let sums = format!("1{} > 0", "+1".repeat(254));
        let err = Gate::compile(&sums).unwrap_err();
        assert!(err.contains("more than 48 deep"), "{err}");

        // Just within the limit, evaluation fits a 2 MiB thread (tokio's default).
        let gate = Gate::compile(&format!("1{} > 0", "+1".repeat(46))).unwrap();
        let scope = message(|_| {});
        let open = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || gate.evaluate(&scope))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(open, Ok(true));
    }
}
