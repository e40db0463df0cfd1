//! Compiling `.proto` sources at runtime, with `buf/validate/validate.proto` and the
//! Google well-known types available to import.
//!
//! Roles use it for the request messages of their verbs (the surface contract), the
//! testkit for its fixture schema. `buf/validate` is resolved from the descriptor set
//! `prost-protovalidate-types` ships, the same schema the validator reads.

use prost_reflect::DescriptorPool;
use protox::file::{
    ChainFileResolver, DescriptorSetFileResolver, File, FileResolver, GoogleFileResolver,
};

struct InMemory {
    name: String,
    source: String,
}

impl FileResolver for InMemory {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == self.name {
            File::from_source(name, &self.source)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// Compiles one proto file from `source` and returns the encoded `FileDescriptorSet`
/// with every import included.
pub fn compile_proto_source(file_name: &str, source: &str) -> Result<Vec<u8>, String> {
    compile(file_name, source, false)
}

/// [`compile_proto_source`], keeping the source's comments (source info) for `file_name`
/// (the console shows a field's comment as its description).
pub fn compile_proto_source_documented(file_name: &str, source: &str) -> Result<Vec<u8>, String> {
    compile(file_name, source, true)
}

fn compile(file_name: &str, source: &str, source_info: bool) -> Result<Vec<u8>, String> {
    let mut resolver = ChainFileResolver::new();
    resolver.add(InMemory {
        name: file_name.to_owned(),
        source: source.to_owned(),
    });
    resolver.add(GoogleFileResolver::new());
    let validate_schema = prost_protovalidate_types::DESCRIPTOR_POOL.encode_to_vec();
    resolver.add(
        DescriptorSetFileResolver::decode(validate_schema.as_slice())
            .map_err(|e| format!("the buf.validate schema does not decode: {e}"))?,
    );
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.include_source_info(source_info);
    compiler
        .open_file(file_name)
        .map_err(|e| format!("{file_name} does not compile: {e}"))?;
    let encoded = compiler.encode_file_descriptor_set();
    if source_info {
        only_own_source_info(file_name, &encoded)
    } else {
        Ok(encoded)
    }
}

/// Drops the source info of every file but `file_name` (the imports' comments, the
/// whole of `descriptor.proto`'s among them, would only weigh down each snapshot).
/// Read as a dynamic message, so the files' options (their `buf.validate` rules) are
/// kept byte for byte.
fn only_own_source_info(file_name: &str, encoded: &[u8]) -> Result<Vec<u8>, String> {
    use prost::Message;
    use prost_reflect::{DynamicMessage, ReflectMessage, Value};
    let set_type = prost_types::FileDescriptorSet::default().descriptor();
    let mut set = DynamicMessage::decode(set_type, encoded)
        .map_err(|e| format!("{file_name}: the compiled set does not decode: {e}"))?;
    if let Some(Value::List(files)) = set.get_field_by_name_mut("file") {
        for file in files.iter_mut() {
            if let Value::Message(file) = file {
                let own = file
                    .get_field_by_name("name")
                    .is_some_and(|name| name.as_str() == Some(file_name));
                if !own {
                    file.clear_field_by_name("source_code_info");
                }
            }
        }
    }
    Ok(set.encode_to_vec())
}

/// Compiles one proto file from `source` into a descriptor pool.
pub fn compile_proto_pool(file_name: &str, source: &str) -> Result<DescriptorPool, String> {
    let bytes = compile_proto_source(file_name, source)?;
    DescriptorPool::decode(bytes.as_slice()).map_err(|e| format!("{file_name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_with_validate_rules_and_reports_errors() {
        let pool = compile_proto_pool(
            "t.proto",
            "syntax = \"proto3\"; package t; import \"buf/validate/validate.proto\";\n\
             message M { string s = 1 [(buf.validate.field).string.min_len = 1]; }",
        )
        .unwrap();
        assert!(pool.get_message_by_name("t.M").is_some());
        let err = compile_proto_source("t.proto", "syntax = \"proto3\"; message {").unwrap_err();
        assert!(err.starts_with("t.proto does not compile"), "{err}");
    }
}
