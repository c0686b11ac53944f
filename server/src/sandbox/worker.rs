//! The worker process: `partyflow sandbox-worker <memory bytes> <cpu seconds>`,
//! started by the pool (never by people). It confines itself, then answers
//! requests from stdin on stdout until stdin closes.
//!
//! Confinement, set before the first request is read, so nothing a program does
//! runs outside it:
//! - address space: what the worker uses once warm, plus the memory limit
//!   (`RLIMIT_AS`); an allocation past it fails, Rust aborts the process, and
//!   the pool reads "memory allocation of … failed" on stderr;
//! - CPU time: before each request, the time used so far plus the limit
//!   (the soft `RLIMIT_CPU`; the kernel sends SIGXCPU, which ends the process);
//! - no files written (`RLIMIT_FSIZE` 0), no core dumps (`RLIMIT_CORE` 0), no
//!   new descriptors beyond a handful (`RLIMIT_NOFILE`), no privileges gained
//!   through exec (`PR_SET_NO_NEW_PRIVS`), and death with the server
//!   (`PR_SET_PDEATHSIG`). The pool starts it with an empty environment in `/`.
//!
//! jq has no I/O of its own here (see `dispatch::transform`): a program can only
//! compute, and whatever it computes, the worst it can do is end this process.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter};
use std::process::ExitCode;
use std::time::Duration;

use rustix::process::{Resource, Rlimit};
use serde_json::value::RawValue;

use super::protocol::{read_frame, write_frame, Op, Request, Response, MAX_REQUEST_BYTES};
use crate::dispatch::transform::{self, Transform, TransformError};

/// Compiled programs kept per worker; the cache starts over when full.
const CACHED_PROGRAMS: usize = 1024;

/// The argument that makes a `partyflow` binary a worker.
pub const ARG: &str = "sandbox-worker";

/// Runs the worker if the process was started as one (`<binary> sandbox-worker
/// …`); every binary that may host the server calls this first.
pub fn run_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args();
    let _binary = args.next();
    if args.next().as_deref() != Some(ARG) {
        return None;
    }
    let memory = args.next().and_then(|a| a.parse::<u64>().ok());
    let cpu = args.next().and_then(|a| a.parse::<u64>().ok());
    let (Some(memory), Some(cpu)) = (memory, cpu) else {
        eprintln!("usage: {ARG} <memory bytes> <cpu seconds>");
        return Some(ExitCode::from(2));
    };
    Some(main(memory, cpu))
}

fn main(memory_bytes: u64, cpu_seconds: u64) -> ExitCode {
    // Checkpoints unwind without the hook; other panics are caught and answered.
    // Either way nothing needs printing, and stderr stays for fatal causes.
    std::panic::set_hook(Box::new(|_| {}));
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let _ = rustix::thread::set_no_new_privs(true);
    let served = std::thread::Builder::new()
        .name("sandbox".into())
        .stack_size(transform::THREAD_STACK_BYTES)
        .spawn(move || serve(memory_bytes, cpu_seconds));
    match served.map(|t| t.join()) {
        Ok(Ok(Ok(()))) => ExitCode::SUCCESS,
        Ok(Ok(Err(e))) => {
            eprintln!("sandbox worker: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::FAILURE,
    }
}

fn serve(memory_bytes: u64, cpu_seconds: u64) -> io::Result<()> {
    // Warm up (the allocator's arena, jaq's standard library), then confine.
    let mut cache: HashMap<String, Transform> = HashMap::new();
    let warm = transform::compile_on_this_thread(".").map_err(io::Error::other)?;
    let _ = warm.run_on_this_thread(&serde_json::Value::Null, None);
    confine(memory_bytes)?;

    let mut input = BufReader::new(io::stdin().lock());
    let mut output = BufWriter::new(io::stdout().lock());
    while let Some(frame) = read_frame(&mut input, MAX_REQUEST_BYTES)? {
        limit_cpu(cpu_seconds)?;
        let response = match serde_json::from_slice::<Request>(&frame) {
            Ok(request) => answer(&mut cache, request),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        };
        drop(frame);
        let body = serde_json::to_vec(&response).map_err(io::Error::other)?;
        drop(response);
        write_frame(&mut output, &body)?;
    }
    Ok(())
}

fn answer(cache: &mut HashMap<String, Transform>, request: Request<'_>) -> Response {
    let result = match (request.op, request.input) {
        (Op::Compile, _) => compiled(cache, &request.program).map(|_| Response::Compiled),
        (Op::Run, Some(input)) => {
            run(cache, &request.program, input, request.limit_ms).map(Response::Output)
        }
        (Op::Run, None) => Err(TransformError::Runtime("no input to run on".into())),
    };
    result.unwrap_or_else(Response::Failed)
}

fn run(
    cache: &mut HashMap<String, Transform>,
    program: &str,
    input: &RawValue,
    limit_ms: u64,
) -> Result<Box<RawValue>, TransformError> {
    let transform = compiled(cache, program)?;
    let input: serde_json::Value = serde_json::from_str(input.get())
        .map_err(|e| TransformError::Runtime(format!("the payload is not JSON: {e}")))?;
    let output = transform.run_on_this_thread(&input, Some(Duration::from_millis(limit_ms)))?;
    drop(input);
    let text = transform::to_bounded_json(&output)?;
    drop(output);
    RawValue::from_string(text).map_err(|e| TransformError::Output(e.to_string()))
}

fn compiled(
    cache: &mut HashMap<String, Transform>,
    program: &str,
) -> Result<Transform, TransformError> {
    if let Some(t) = cache.get(program) {
        return Ok(t.clone());
    }
    let t = transform::compile_on_this_thread(program)?;
    if cache.len() >= CACHED_PROGRAMS {
        cache.clear();
    }
    cache.insert(program.to_owned(), t.clone());
    Ok(t)
}

/// The limits that hold for the worker's whole life.
fn confine(memory_bytes: u64) -> io::Result<()> {
    let fixed = |limit: u64| Rlimit {
        current: Some(limit),
        maximum: Some(limit),
    };
    rustix::process::setrlimit(Resource::Core, fixed(0))?;
    rustix::process::setrlimit(Resource::Fsize, fixed(0))?;
    rustix::process::setrlimit(Resource::Nofile, fixed(16))?;
    let address_space = address_space_in_use()? + memory_bytes;
    rustix::process::setrlimit(Resource::As, fixed(address_space))?;
    Ok(())
}

/// The CPU time this request may use: what was used so far plus the limit. Only
/// the soft limit moves (SIGXCPU ends the process; nothing here catches it): a
/// hard limit can be lowered but never raised again without privileges.
fn limit_cpu(cpu_seconds: u64) -> io::Result<()> {
    let used = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let soft = used.tv_sec as u64 + 1 + cpu_seconds;
    let hard = rustix::process::getrlimit(Resource::Cpu).maximum;
    rustix::process::setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(hard.map_or(soft, |h| soft.min(h))),
            maximum: hard,
        },
    )?;
    Ok(())
}

/// `VmSize` of this process, in bytes.
fn address_space_in_use() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    vm_size(&status).ok_or_else(|| io::Error::other("no VmSize in /proc/self/status"))
}

fn vm_size(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_space_is_read_from_proc_status() {
        assert_eq!(
            vm_size("Name:\tx\nVmPeak:\t  9000 kB\nVmSize:\t  8192 kB\n"),
            Some(8192 * 1024)
        );
        assert_eq!(vm_size("Name:\tx\n"), None);
        assert!(address_space_in_use().unwrap() > 0);
    }
}
