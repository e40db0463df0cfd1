//! `when` gates: a CEL boolean over `input` and the earlier steps.
//!
//! Messages enter CEL as maps keyed by proto field name, with every field present
//! (unset fields read their defaults), so `size(tokenize.ids) > 0` works whether or
//! not the tokenizer returned ids.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, MapExpr, StructExpr};
use cel::objects::{Key, Value as CelValue};
use cel::{Context, IdedExpr, Program};
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};

use crate::scope::Scope;

/// A compiled `when` expression.
#[derive(Clone)]
pub struct Gate {
    /// The expression as written.
    pub source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("source", &self.source)
            .finish()
    }
}

impl Gate {
    /// Compiles the expression; the error is the CEL parser's complaint.
    pub fn compile(source: &str) -> Result<Gate, String> {
        let program = Program::compile(source).map_err(|e| e.to_string())?;
        Ok(Gate {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// The free variables the expression reads (its scope roots), in order of first
    /// use. Variables bound by comprehension macros (`ids.exists(i, i > 5)`) are not
    /// roots and are left out.
    pub fn variables(&self) -> Vec<String> {
        let mut free = Vec::new();
        free_variables(self.program.expression(), &mut Vec::new(), &mut free);
        free
    }

    /// Evaluates the gate; anything but a boolean is an error.
    pub fn evaluate(&self, scope: &Scope) -> Result<bool, String> {
        let mut context = Context::default();
        for (name, message) in scope.roots() {
            context.add_variable_from_value(name.to_owned(), message_value(message));
        }
        match self.program.execute(&context) {
            Ok(CelValue::Bool(open)) => Ok(open),
            Ok(other) => Err(format!("`when` must evaluate to a bool, got {other:?}")),
            Err(e) => Err(format!("`when` could not be evaluated: {e}")),
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

fn message_value(message: &DynamicMessage) -> CelValue {
    let map: HashMap<Key, CelValue> = message
        .descriptor()
        .fields()
        .map(|field| {
            let value = message.get_field(&field);
            (
                Key::String(Arc::new(field.name().to_owned())),
                field_value(&value),
            )
        })
        .collect();
    CelValue::Map(map.into())
}

fn field_value(value: &Value) -> CelValue {
    match value {
        Value::Bool(b) => CelValue::Bool(*b),
        Value::I32(v) => CelValue::Int((*v).into()),
        Value::I64(v) => CelValue::Int(*v),
        Value::U32(v) => CelValue::UInt((*v).into()),
        Value::U64(v) => CelValue::UInt(*v),
        Value::F32(v) => CelValue::Float((*v).into()),
        Value::F64(v) => CelValue::Float(*v),
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Bytes(b) => CelValue::Bytes(Arc::new(b.to_vec())),
        Value::EnumNumber(n) => CelValue::Int((*n).into()),
        Value::Message(m) => message_value(m),
        Value::List(items) => CelValue::List(Arc::new(items.iter().map(field_value).collect())),
        Value::Map(entries) => {
            let map: HashMap<Key, CelValue> = entries
                .iter()
                .map(|(key, value)| {
                    let key = match key {
                        MapKey::Bool(b) => Key::Bool(*b),
                        MapKey::I32(v) => Key::Int((*v).into()),
                        MapKey::I64(v) => Key::Int(*v),
                        MapKey::U32(v) => Key::Uint((*v).into()),
                        MapKey::U64(v) => Key::Uint(*v),
                        MapKey::String(s) => Key::String(Arc::new(s.clone())),
                    };
                    (key, field_value(value))
                })
                .collect();
            CelValue::Map(map.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Gate;

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
}
