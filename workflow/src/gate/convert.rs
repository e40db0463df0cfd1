//! The data a gate reads, converted from protobuf values into CEL values within a
//! budget: every value and byte converted is charged first, so no input can make a
//! gate's conversion unbounded.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Value as CelValue};
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};

/// Most messages nested in one another that a gate converts.
pub const MAX_MESSAGE_DEPTH: usize = 64;
/// Most values (messages, fields, list and map elements) a gate converts.
pub const MAX_CONVERTED_VALUES: u64 = 1_000_000;
/// Most bytes of strings and bytes a gate converts.
pub const MAX_CONVERTED_BYTES: u64 = 64 * 1024 * 1024;

/// What one gate evaluation has converted so far; every conversion is charged here
/// first, so no input can make it unbounded.
#[derive(Default)]
pub(super) struct Budget {
    /// Values converted so far.
    pub(super) values: u64,
    /// Bytes of strings and bytes converted so far.
    pub(super) bytes: u64,
}

impl Budget {
    pub(super) fn charge(&mut self, values: u64, bytes: u64) -> Result<(), String> {
        self.values += values;
        self.bytes += bytes;
        if self.values > MAX_CONVERTED_VALUES {
            return Err(format!(
                "the `when` gate reads more than {MAX_CONVERTED_VALUES} values (the limit): read less of the data, or check it in a step"
            ));
        }
        if self.bytes > MAX_CONVERTED_BYTES {
            return Err(format!(
                "the `when` gate reads more than {MAX_CONVERTED_BYTES} bytes of strings and bytes (the limit): read less of the data, or check it in a step"
            ));
        }
        Ok(())
    }

    /// Converts a message at nesting `depth` (the root is 1), presence-correctly.
    pub(super) fn message(
        &mut self,
        message: &DynamicMessage,
        depth: usize,
    ) -> Result<CelValue, String> {
        if depth > MAX_MESSAGE_DEPTH {
            return Err(format!(
                "the `when` gate reads messages nested more than {MAX_MESSAGE_DEPTH} deep (the limit)"
            ));
        }
        self.charge(1, 0)?;
        if let Some(inner) = self.wrapper(message)? {
            return Ok(inner);
        }
        let mut map = HashMap::new();
        for field in message.descriptor().fields() {
            // Presence-tracking fields that are not set are absent; implicit-presence
            // scalars, lists and maps are always there (get_field reads the default).
            // An unset message field is never expanded, which is what keeps a
            // recursive type finite.
            let present = field.is_list()
                || field.is_map()
                || !field.supports_presence()
                || message.has_field(&field);
            if !present {
                continue;
            }
            let value = self.value(&message.get_field(&field), depth)?;
            map.insert(Key::String(Arc::new(field.name().to_owned())), value);
        }
        Ok(CelValue::Map(map.into()))
    }

    /// The inner value of a `google.protobuf` wrapper, as CEL reads wrappers.
    pub(super) fn wrapper(&mut self, message: &DynamicMessage) -> Result<Option<CelValue>, String> {
        const WRAPPERS: &[&str] = &[
            "google.protobuf.BoolValue",
            "google.protobuf.Int32Value",
            "google.protobuf.Int64Value",
            "google.protobuf.UInt32Value",
            "google.protobuf.UInt64Value",
            "google.protobuf.FloatValue",
            "google.protobuf.DoubleValue",
            "google.protobuf.StringValue",
            "google.protobuf.BytesValue",
        ];
        let descriptor = message.descriptor();
        if !WRAPPERS.contains(&descriptor.full_name()) {
            return Ok(None);
        }
        match descriptor.get_field_by_name("value") {
            Some(field) => Ok(Some(self.value(&message.get_field(&field), 1)?)),
            None => Ok(None),
        }
    }

    /// Converts a field value found in a message at nesting `depth`.
    pub(super) fn value(&mut self, value: &Value, depth: usize) -> Result<CelValue, String> {
        Ok(match value {
            Value::Message(m) => return self.message(m, depth + 1),
            Value::List(items) => {
                self.charge(1, 0)?;
                let mut list = Vec::with_capacity(items.len().min(1024));
                for item in items {
                    list.push(self.value(item, depth)?);
                }
                CelValue::List(Arc::new(list))
            }
            Value::Map(entries) => {
                self.charge(1, 0)?;
                let mut map = HashMap::with_capacity(entries.len().min(1024));
                for (key, value) in entries {
                    let key = match key {
                        MapKey::Bool(b) => Key::Bool(*b),
                        MapKey::I32(v) => Key::Int((*v).into()),
                        MapKey::I64(v) => Key::Int(*v),
                        MapKey::U32(v) => Key::Uint((*v).into()),
                        MapKey::U64(v) => Key::Uint(*v),
                        MapKey::String(s) => {
                            self.charge(0, s.len() as u64)?;
                            Key::String(Arc::new(s.clone()))
                        }
                    };
                    map.insert(key, self.value(value, depth)?);
                }
                CelValue::Map(map.into())
            }
            scalar => {
                let bytes = match scalar {
                    Value::String(s) => s.len(),
                    Value::Bytes(b) => b.len(),
                    _ => 0,
                };
                self.charge(1, bytes as u64)?;
                scalar_value(scalar)
            }
        })
    }
}

fn scalar_value(value: &Value) -> CelValue {
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
        // Containers are converted by Budget::value, which charges them.
        Value::Message(_) | Value::List(_) | Value::Map(_) => CelValue::Null,
    }
}
