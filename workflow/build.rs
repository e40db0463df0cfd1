//! With the `testkit` feature, generates the tonic servers of the fixture services
//! (`fixtures/jobs_test.proto`) so the testkit can serve them for real. The engine
//! itself generates nothing: it works from descriptors at runtime.

use std::error::Error;

use protox::file::{
    ChainFileResolver, DescriptorSetFileResolver, GoogleFileResolver, IncludeFileResolver,
};

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=fixtures");
    if std::env::var_os("CARGO_FEATURE_TESTKIT").is_none() {
        return Ok(());
    }
    let validate_schema = prost_protovalidate_types::DESCRIPTOR_POOL.encode_to_vec();
    let mut resolver = ChainFileResolver::new();
    resolver.add(IncludeFileResolver::new("fixtures".into()));
    resolver.add(GoogleFileResolver::new());
    resolver.add(DescriptorSetFileResolver::decode(
        validate_schema.as_slice(),
    )?);
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.open_file("jobs_test.proto")?;

    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".buf.validate", "::prost_protovalidate_types")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
