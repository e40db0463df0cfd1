//! Compiles `proto/protomolt/jobs/v1/jobs.proto` (the repository's top-level `proto/`,
//! which users get too) with protox (pure Rust, no `protoc`
//! needed for our own file) and generates prost types for it.
//!
//! `buf/validate/validate.proto` is resolved from the descriptor set that
//! `prost-protovalidate-types` carries, so the rules we annotate and the rules the
//! validator understands always come from the same schema. The copy under
//! `proto/buf/validate/` is for users compiling the contract in other languages; a
//! test keeps it equal to the validator's.

use std::error::Error;
use std::path::PathBuf;

use protox::file::{
    ChainFileResolver, DescriptorSetFileResolver, GoogleFileResolver, IncludeFileResolver,
};

const PROTO_ROOT: &str = "../proto";
const CONTRACT: &str = "protomolt/jobs/v1/jobs.proto";
const DESCRIPTOR_SET_FILE: &str = "protomolt_jobs_v1_descriptor_set.bin";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");

    let validate_schema = prost_protovalidate_types::DESCRIPTOR_POOL.encode_to_vec();
    let mut resolver = ChainFileResolver::new();
    resolver.add(IncludeFileResolver::new(PathBuf::from(PROTO_ROOT)));
    resolver.add(GoogleFileResolver::new());
    resolver.add(DescriptorSetFileResolver::decode(
        validate_schema.as_slice(),
    )?);

    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true).include_source_info(true);
    compiler.open_file(CONTRACT)?;
    let descriptor_set = compiler.file_descriptor_set();

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join(DESCRIPTOR_SET_FILE),
        compiler.encode_file_descriptor_set(),
    )?;

    let mut config = prost_build::Config::new();
    config
        // The validate schema's Rust types already exist; we only need its options.
        .extern_path(".buf.validate", "::prost_protovalidate_types")
        // Runtime reflection (and so buf.validate evaluation) on every contract message.
        .message_attribute(".protomolt.jobs.v1", "#[derive(::prost_reflect::ReflectMessage)]")
        .message_attribute(
            ".protomolt.jobs.v1.WorkflowRunEvent",
            r#"#[prost_reflect(descriptor_pool = "crate::DESCRIPTOR_POOL", message_name = "protomolt.jobs.v1.WorkflowRunEvent")]"#,
        )
        .message_attribute(
            ".protomolt.jobs.v1.WorkflowRunRequest",
            r#"#[prost_reflect(descriptor_pool = "crate::DESCRIPTOR_POOL", message_name = "protomolt.jobs.v1.WorkflowRunRequest")]"#,
        )
        .message_attribute(
            ".protomolt.jobs.v1.SendEvent",
            r#"#[prost_reflect(descriptor_pool = "crate::DESCRIPTOR_POOL", message_name = "protomolt.jobs.v1.SendEvent")]"#,
        );
    config.compile_fds(descriptor_set)?;
    Ok(())
}
