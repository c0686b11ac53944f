//! The `partyflow` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    server::cli::main()
}
