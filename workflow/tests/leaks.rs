//! A compiled workflow gives back all its memory when it is dropped, recursive types
//! included. Alone in its test binary: it counts the bytes the process holds, which
//! other tests running beside it would change.
//!
//! Found by the `envelope` fuzz target: prost-protovalidate 0.6.0 held a recursive
//! type's evaluator in an `Arc` cycle, so every workflow compiled with one (as every
//! submission and every claim compiles) leaked its validator and descriptor pool
//! (third_party/prost-protovalidate/PATCHES.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use base64::Engine as _;
use serde_json::json;
use workflow::CompiledWorkflow;

/// The system allocator, counting the bytes currently held.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is
// kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SCHEMA: &str = r#"
syntax = "proto3";
package jobs.leak;
import "buf/validate/validate.proto";
import "google/protobuf/struct.proto";
message Tree {
  string name = 1 [(buf.validate.field).string.min_len = 1];
  repeated Tree children = 2;
  google.protobuf.Struct labels = 3;
}
message Tokens { repeated int64 ids = 1; }
service Tokenizer { rpc Tokenize(Tree) returns (Tokens); }
"#;

#[test]
fn compiling_workflows_with_recursive_types_holds_no_memory_afterwards() {
    let schema = workflow::schema::compile_proto_source("leak.proto", SCHEMA)
        .unwrap_or_else(|e| panic!("{e}"));
    let envelope = json!({
        "name": "leak",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(schema) },
        "inputType": "jobs.leak.Tree",
        "steps": [{
            "name": "tokenize", "target": "127.0.0.1:1", "method": "jobs.leak.Tokenizer/Tokenize",
            "rules": ["name = input.name", "children = input.children"],
        }],
    });
    let compile_and_validate = || {
        let compiled = CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
        let input = json!({ "name": "root", "children": [{ "name": "" }] });
        assert!(
            compiled.parse_input(&input).is_err(),
            "the nested rule runs"
        );
    };
    // Warm up: lazily built statics (the buf.validate descriptors, CEL's functions).
    for _ in 0..3 {
        compile_and_validate();
    }
    let before = HELD.load(Ordering::Relaxed);
    for _ in 0..40 {
        compile_and_validate();
    }
    let grown = HELD.load(Ordering::Relaxed) - before;
    // Before the fix, one compile of this workflow held about 2.4 MB for good (40: 95 MB).
    assert!(
        grown < 16 * 1024,
        "40 compiles left {grown} bytes held after they were dropped"
    );
}
