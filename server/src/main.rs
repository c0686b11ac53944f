//! The `partyflow` binary; everything lives in the library.

/// mimalloc, not the system's allocator, for Rust's allocations and (its `override`
/// feature) for C's `malloc`, SQLite's included: see `docs/7-storage.md`, "The allocator".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    server::cli::main()
}
