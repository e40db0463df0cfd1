//! Compiling `.proto` sources at runtime, with `buf/validate/validate.proto` and the
//! Google well-known types available to import.
//!
//! Roles use it for the request messages of their verbs (the surface contract), the
//! testkit for its fixture schema. `buf/validate` is resolved from the descriptor set
//! `prost-protovalidate-types` ships, the same schema the validator reads.

use prost_reflect::DescriptorPool;
use protox::file::{
    ChainFileResolver, DescriptorSetFileResolver, File, FileResolver, GoogleFileResolver,
    IncludeFileResolver,
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
    compile_with(resolver, &[file_name.to_owned()], source_info)
}

/// Compiles `.proto` files from disk, as `protomolt workflows build` does: each file
/// is opened by its name within its own directory, and imports resolve against those
/// directories, then `includes`, then the Google well-known types and
/// `buf/validate/validate.proto`. Returns the encoded `FileDescriptorSet` with every
/// import, keeping the comments of the named files (a generated form shows them).
pub fn compile_proto_files(
    files: &[std::path::PathBuf],
    includes: &[std::path::PathBuf],
) -> Result<Vec<u8>, String> {
    let mut resolver = ChainFileResolver::new();
    let mut names = Vec::with_capacity(files.len());
    let mut roots: Vec<std::path::PathBuf> = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("{}: not a file name", file.display()))?;
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => std::path::PathBuf::from("."),
        };
        if !file.is_file() {
            return Err(format!("{}: no such file", file.display()));
        }
        if !roots.contains(&dir) {
            roots.push(dir);
        }
        names.push(name.to_owned());
    }
    for root in roots.iter().chain(includes) {
        resolver.add(IncludeFileResolver::new(root.clone()));
    }
    compile_with(resolver, &names, true)
}

/// Compiles `names` with `resolver`, then the Google well-known types and
/// `buf/validate`, imports included.
fn compile_with(
    mut resolver: ChainFileResolver,
    names: &[String],
    source_info: bool,
) -> Result<Vec<u8>, String> {
    resolver.add(GoogleFileResolver::new());
    let validate_schema = prost_protovalidate_types::DESCRIPTOR_POOL.encode_to_vec();
    resolver.add(
        DescriptorSetFileResolver::decode(validate_schema.as_slice())
            .map_err(|e| format!("the buf.validate schema does not decode: {e}"))?,
    );
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.include_source_info(source_info);
    for name in names {
        compiler
            .open_file(name)
            .map_err(|e| format!("{name} does not compile: {e}"))?;
    }
    let encoded = compiler.encode_file_descriptor_set();
    if source_info {
        only_own_source_info(names, &encoded)
    } else {
        Ok(encoded)
    }
}

/// Drops the source info of every file but `own` (the imports' comments, the whole of
/// `descriptor.proto`'s among them, would only weigh down each snapshot). Read as a
/// dynamic message, so the files' options (their `buf.validate` rules) are kept byte
/// for byte.
fn only_own_source_info(own: &[String], encoded: &[u8]) -> Result<Vec<u8>, String> {
    let file_name = own.join(", ");
    use prost::Message;
    use prost_reflect::{DynamicMessage, ReflectMessage, Value};
    let set_type = prost_types::FileDescriptorSet::default().descriptor();
    let mut set = DynamicMessage::decode(set_type, encoded)
        .map_err(|e| format!("{file_name}: the compiled set does not decode: {e}"))?;
    if let Some(Value::List(files)) = set.get_field_by_name_mut("file") {
        for file in files.iter_mut() {
            if let Value::Message(file) = file {
                let own = file.get_field_by_name("name").is_some_and(|name| {
                    name.as_str()
                        .is_some_and(|name| own.iter().any(|o| o == name))
                });
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
