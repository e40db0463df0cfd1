//! `protomolt-node`: the example node host. It mounts the roles its configuration
//! enables (registry, parse, jobs) and serves the shared actions route.
//!
//! Until the host framework lands it only answers `--version`.

fn main() {
    let wants_version = std::env::args()
        .skip(1)
        .any(|arg| arg == "--version" || arg == "-V");
    if wants_version {
        println!("protomolt-node {}", env!("CARGO_PKG_VERSION"));
    } else {
        eprintln!(
            "protomolt-node {}: the node host lands with the host-framework issue; try --version",
            env!("CARGO_PKG_VERSION")
        );
        std::process::exit(2);
    }
}
