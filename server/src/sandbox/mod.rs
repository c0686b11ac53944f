//! Where user programs run: a pool of sandboxed worker processes.
//!
//! Transformations (and every later program a tenant writes) are jq programs
//! from API users. The interpreter (`dispatch::transform`) stops most runaways
//! itself, but a single native operation can still allocate without bound or
//! recurse past any stack, and in-process either would end the server for every
//! tenant. So the server never runs them: it sends each compile and run to a
//! warm worker process (`partyflow sandbox-worker`, see [`worker`]) that has
//! confined itself with rlimits (address space, CPU time, no files) and speaks
//! a framed protocol over its stdin and stdout ([`protocol`]).
//!
//! A worker that dies, overruns its wall-clock bound or answers nonsense is
//! killed and replaced in the background; only the request it was running
//! fails, with a [`TransformError`] that names the cause ("used more than 256
//! MiB of memory", "ran longer than 1 s", "crashed its sandbox (stack
//! overflow)"). Workers are started ahead of need and kept warm, and each keeps
//! the programs it compiled, so a transformed delivery costs two pipe writes and
//! the program's own time, not a process start.

pub mod protocol;
pub mod worker;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use crate::dispatch::transform::TransformError;
use protocol::{frame_len, Request, Response, MAX_RESPONSE_BYTES};

/// Added to the wall-clock bound before a worker that has not answered is
/// killed: the interpreter stops itself at the bound, at its next checkpoint.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// How much of a dead worker's stderr is kept to tell why it died.
const STDERR_TAIL_BYTES: usize = 4096;

/// `[sandbox]` in the configuration (`PARTYFLOW_SANDBOX__…`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Worker processes; 0 means one per CPU (at least 2).
    pub workers: usize,
    /// Memory a program may use, in MiB, beyond the worker's own.
    pub memory_mib: u64,
    /// CPU time a program may use, in seconds (a backstop: the wall-clock bound
    /// usually stops it first).
    pub cpu_seconds: u64,
    /// Wall-clock time a program may run, in milliseconds.
    pub timeout_ms: u64,
    /// The binary to start as a worker (with the argument `sandbox-worker`); by
    /// default the running binary itself.
    pub worker_program: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            workers: 0,
            memory_mib: 256,
            cpu_seconds: 2,
            timeout_ms: 1000,
            worker_program: None,
        }
    }
}

/// A handle on the pool; cheap to clone, shared by the engine, the API and the
/// console.
#[derive(Clone)]
pub struct Sandbox {
    pool: Arc<Pool>,
}

struct Pool {
    program: PathBuf,
    args: Vec<OsString>,
    settings: Settings,
    /// How many workers the pool keeps.
    size: usize,
    /// One permit per worker: a request waits here for a free worker.
    permits: Semaphore,
    idle: Mutex<Vec<Worker>>,
}

impl Sandbox {
    /// Starts the pool and its first workers (in the background: the first
    /// requests wait for them).
    pub fn start(settings: Settings) -> anyhow::Result<Self> {
        let program = match &settings.worker_program {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("finding the sandbox worker's binary: {e}"))?,
        };
        let workers = match settings.workers {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
            n => n,
        };
        let args = vec![
            OsString::from(worker::ARG),
            OsString::from((settings.memory_mib << 20).to_string()),
            OsString::from(settings.cpu_seconds.max(1).to_string()),
        ];
        let pool = Arc::new(Pool {
            program,
            args,
            settings,
            size: workers,
            permits: Semaphore::new(workers),
            idle: Mutex::new(Vec::with_capacity(workers)),
        });
        for _ in 0..workers {
            pool.replace_in_background();
        }
        Ok(Self { pool })
    }

    /// The wall-clock bound of one run.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.pool.settings.timeout_ms.max(1))
    }

    /// Checks that `program` compiles, in a worker (a program that crashes the
    /// compiler fails here, not in the server).
    pub async fn check(&self, program: &str) -> Result<(), TransformError> {
        match self
            .pool
            .call(&Request::compile(program), self.timeout())
            .await?
        {
            Response::Compiled => Ok(()),
            Response::Failed(e) => Err(e),
            Response::Output(_) => Err(nonsense()),
        }
    }

    /// Runs `program` on `input` (JSON text) and returns its first output as
    /// JSON text, within [`Sandbox::timeout`].
    pub async fn run(&self, program: &str, input: &RawValue) -> Result<String, TransformError> {
        let limit = self.timeout();
        let request = Request::run(program, input, limit.as_millis() as u64);
        match self.pool.call(&request, limit).await? {
            Response::Output(output) => Ok(String::from(Box::<str>::from(output))),
            Response::Failed(e) => Err(e),
            Response::Compiled => Err(nonsense()),
        }
    }
}

fn nonsense() -> TransformError {
    TransformError::Crashed("the worker answered out of turn".into())
}

impl Pool {
    async fn call(
        self: &Arc<Self>,
        request: &Request<'_>,
        limit: Duration,
    ) -> Result<Response, TransformError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| TransformError::Runtime(format!("the request cannot be sent: {e}")))?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| TransformError::Unavailable("the sandbox is closed".into()))?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut worker = match idle {
            Some(w) => w,
            None => self.spawn().map_err(|e| {
                tracing::error!(error = %e, "starting a sandbox worker failed");
                TransformError::Unavailable(format!("no worker could be started: {e}"))
            })?,
        };
        // The worker stops the program itself at `limit`; past the grace it is stuck.
        let answer = tokio::time::timeout(limit + KILL_GRACE, worker.exchange(&body)).await;
        let failure = match answer {
            Ok(Ok(response)) => {
                self.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(worker);
                return Ok(response);
            }
            Ok(Err(_)) => worker.cause_of_death(&self.settings).await,
            Err(_) => {
                worker.kill().await;
                TransformError::Timeout {
                    limit_ms: limit.as_millis() as u64,
                }
            }
        };
        tracing::warn!(cause = %failure, "a sandbox worker was stopped; starting another");
        self.replace_in_background();
        Err(failure)
    }

    fn spawn(&self) -> std::io::Result<Worker> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .env_clear()
            // One malloc arena: the address-space limit then measures the program.
            .env("MALLOC_ARENA_MAX", "1")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the worker's pipes are missing"));
        };
        // Kept apart from the answers; read all along so it never fills up.
        let stderr_task = tokio::spawn(async move {
            let mut tail = Vec::new();
            let mut chunk = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
            tail
        });
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr: Some(stderr_task),
        })
    }

    /// Starts a worker and adds it to the idle ones, unless there are enough.
    fn replace_in_background(self: &Arc<Self>) {
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            match pool.spawn() {
                Ok(worker) => {
                    let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
                    if idle.len() < pool.size {
                        idle.push(worker);
                    }
                }
                Err(e) => tracing::error!(error = %e, "starting a sandbox worker failed"),
            }
        });
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
}

impl Worker {
    async fn exchange(&mut self, body: &[u8]) -> std::io::Result<Response> {
        let len =
            u32::try_from(body.len()).map_err(|_| std::io::Error::other("request too large"))?;
        self.stdin.write_all(&len.to_le_bytes()).await?;
        self.stdin.write_all(body).await?;
        self.stdin.flush().await?;
        let mut header = [0u8; 4];
        self.stdout.read_exact(&mut header).await?;
        let len = frame_len(header, MAX_RESPONSE_BYTES)?;
        let mut answer = vec![0; len];
        self.stdout.read_exact(&mut answer).await?;
        serde_json::from_slice(&answer)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Why the worker stopped answering: waits for it to end (killing it if it
    /// has not), then reads its exit and the end of its stderr.
    async fn cause_of_death(&mut self, settings: &Settings) -> TransformError {
        let status = match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                self.kill().await;
                None
            }
        };
        let stderr = match self.stderr.take() {
            Some(task) => tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        use std::os::unix::process::ExitStatusExt as _;
        let (signal, code) = match status {
            Some(s) => (s.signal(), s.code()),
            None => (None, None),
        };
        cause_of_death(signal, code, &String::from_utf8_lossy(&stderr), settings)
    }
}

/// Names why a worker ended from its exit signal or code and the end of its
/// stderr: the message the tenant reads on the failed delivery.
fn cause_of_death(
    signal: Option<i32>,
    code: Option<i32>,
    stderr: &str,
    settings: &Settings,
) -> TransformError {
    const SIGXCPU: i32 = 24;
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        return TransformError::Memory {
            limit_mib: settings.memory_mib,
        };
    }
    if signal == Some(SIGXCPU) {
        return TransformError::Cpu {
            limit_seconds: settings.cpu_seconds.max(1),
        };
    }
    if stderr.contains("overflowed its stack") {
        return TransformError::Crashed("stack overflow".into());
    }
    let how = match (signal, code) {
        (Some(6), _) => "aborted".to_owned(),
        (Some(11), _) => "segmentation fault".to_owned(),
        (Some(s), _) => format!("killed by signal {s}"),
        (None, Some(c)) => format!("exit code {c}"),
        (None, None) => "it stopped answering".to_owned(),
    };
    TransformError::Crashed(how)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_worker_is_described_by_its_cause() {
        let s = Settings::default();
        let memory = "memory allocation of 100000000000 bytes failed\n";
        assert_eq!(
            cause_of_death(Some(6), None, memory, &s).to_string(),
            "the jq program used more than 256 MiB of memory"
        );
        assert_eq!(
            cause_of_death(Some(24), None, "", &s).to_string(),
            "the jq program used more than 2 s of CPU time"
        );
        let overflow =
            "\nthread 'sandbox' has overflowed its stack\nfatal runtime error: stack overflow\n";
        assert_eq!(
            cause_of_death(Some(6), None, overflow, &s).to_string(),
            "the jq program crashed its sandbox (stack overflow)"
        );
        assert_eq!(
            cause_of_death(Some(11), None, "", &s),
            TransformError::Crashed("segmentation fault".into())
        );
        assert_eq!(
            cause_of_death(None, Some(1), "sandbox worker: bad frame", &s),
            TransformError::Crashed("exit code 1".into())
        );
    }
}
