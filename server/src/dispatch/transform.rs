//! Transformations (docs §2.10): a destination's optional jq program, applied to
//! the event payload before it is sent.
//!
//! This is the interpreter the sandbox's worker processes run (`crate::sandbox`):
//! a program is compiled once per worker ([`compile_on_this_thread`]) and run on
//! each payload with [`Transform::run_on_this_thread`]. A program that fails — it raises an error,
//! yields nothing, runs out of time, or yields something that is not JSON —
//! fails the delivery with error class `transformation`, which is not retried:
//! the same program on the same payload would fail again.
//!
//! Programs come from API users, so running one must not take the server down:
//! - Compiling and running happen on a thread with a 256 MiB stack (only
//!   touched pages are committed), never on a tokio worker.
//! - jaq does not limit recursion (`def f: 1 + f; f` overflows any stack, which
//!   aborts the process) and has no fuel setting. But it clones its run-time
//!   data at every call, pipe, comma, binding and fold step, and that data is
//!   ours (`Checked`): its `clone` is a checkpoint that measures the stack in use
//!   and looks at the clock, and unwinds out of the interpreter once 64 MiB of
//!   stack is used or the time is up. `range` gets the same checkpoint per value
//!   so that `[range(1e15)]` cannot fill memory between checkpoints.
//! - [`compile_on_this_thread`] refuses programs over [`MAX_PROGRAM_BYTES`] or nested deeper
//!   than [`MAX_PROGRAM_NESTING`]; `fromjson` refuses text nested deeper than
//!   10 000 levels; outputs nested deeper than [`MAX_OUTPUT_DEPTH`] are refused.
//!   jaq's parsers and printers recurse once per level, without checkpoints.
//! - `env` yields `{}` (the environment holds secrets), `debug` and `stderr` log
//!   nothing (payloads are not logged), `halt` is an error instead of the end of
//!   the process, and there are no `input`, `$ENV`, modules or data imports.
//!
//! What this does not contain on its own: one native operation that allocates a
//! lot at once (`"x" * 100000000000` asks for 100 GB, and Rust aborts if the
//! allocator refuses), and values that a program nests some 100 000 levels deep
//! (it can build one in under a second) and then prints, updates or walks, which
//! recurses in jaq's native code past the stack's headroom. That is why the
//! server never runs programs itself: `crate::sandbox` runs them in worker
//! processes under memory and CPU limits, where such a program ends one worker,
//! not the server. The checkpoints here still stop most runaways gracefully,
//! without costing a worker.

use std::cell::Cell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jaq_core::box_iter::box_once;
use jaq_core::compile::Undefined;
use jaq_core::load::{self, lex, parse, Arena, File, Loader};
use jaq_core::native::{self, v, Fun};
use jaq_core::{data::HasLut, Compiler, Ctx, Cv, DataT, Exn, ValXs, Vars};
use jaq_json::{Num, Val};

// Unwinding out of the interpreter is how a runaway program is stopped; with
// `panic = "abort"` that would end the server instead.
#[cfg(panic = "abort")]
compile_error!("dispatch::transform needs panic = \"unwind\" to stop runaway jq programs");

/// The longest program [`compile_on_this_thread`] accepts, in bytes.
pub const MAX_PROGRAM_BYTES: usize = 64 * 1024;

/// How deeply [`compile_on_this_thread`] lets brackets (and chains of unary minus) nest in a
/// program. jaq parses and compiles recursively, using several KiB of stack per
/// level; 30 000 nested `[` overflow even a 256 MiB stack.
pub const MAX_PROGRAM_NESTING: usize = 256;

/// How deeply arrays and objects may nest in a program's output.
pub const MAX_OUTPUT_DEPTH: usize = 512;

/// The largest output a program may produce, as JSON text: a webhook body.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// Stack of the threads that compile and run programs. Only the pages a program
/// actually touches are committed.
pub const THREAD_STACK_BYTES: usize = 256 << 20;

/// How much of [`THREAD_STACK_BYTES`] the interpreter may use before a checkpoint
/// stops it (some 7 000 levels of jq recursion in a debug build, 15 000 in
/// release). The rest is headroom for code that recurses between checkpoints:
/// jaq's parser and compiler (bounded by [`MAX_PROGRAM_NESTING`]) and its native
/// operations on nested values (see the module docs for their limit).
const INTERPRETER_STACK_BYTES: usize = 64 << 20;

/// How often (in checkpoints) a checkpoint looks at the clock.
const CLOCK_EVERY: u32 = 1024;

/// How deeply `fromjson` lets its input nest.
const MAX_FROMJSON_DEPTH: usize = 10_000;

/// The longest error message kept from a failing program, in bytes.
const MAX_MESSAGE_BYTES: usize = 1024;

/// Why a program was not compiled, run, or its output not used. The messages are
/// written for the API user who wrote the program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum TransformError {
    /// The program does not parse or compile; says what is wrong and where.
    #[error("the jq program does not compile: {0}")]
    Compile(String),
    /// The program raised an error (jq's own message) or was stopped.
    #[error("the jq program failed: {0}")]
    Runtime(String),
    /// The program yielded no value (e.g. `empty`, or `select` dropped the input).
    #[error("the program produced no output")]
    NoOutput,
    /// The program did not finish within the time it was given.
    #[error("the jq program ran longer than {}", human_ms(*limit_ms))]
    Timeout { limit_ms: u64 },
    /// The program's output cannot be sent as JSON.
    #[error("the jq program's output is not valid JSON: {0}")]
    Output(String),
    /// The program's output is larger than [`MAX_OUTPUT_BYTES`].
    #[error("the jq program's output is larger than {} KiB", MAX_OUTPUT_BYTES / 1024)]
    OutputTooLarge,
    /// The sandbox stopped the program: it asked for more memory than allowed.
    #[error("the jq program used more than {limit_mib} MiB of memory")]
    Memory { limit_mib: u64 },
    /// The sandbox stopped the program: it used up its CPU time.
    #[error("the jq program used more than {limit_seconds} s of CPU time")]
    Cpu { limit_seconds: u64 },
    /// The program ended its sandbox worker some other way (a stack overflow in
    /// native code, say); the cause as far as it is known.
    #[error("the jq program crashed its sandbox ({0})")]
    Crashed(String),
    /// The sandbox could not run the program at all (no worker could be
    /// started). Not the program's fault: the delivery is tried again later.
    #[error("the transformation sandbox is unavailable: {0}")]
    Unavailable(String),
}

/// `1500` → "1.5 s", `250` → "250 ms", `1000` → "1 s".
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// A compiled jq program. Cheap to clone, `Send + Sync`: compile once per
/// destination and share it between deliveries.
#[derive(Clone)]
pub struct Transform(Arc<Compiled>);

struct Compiled {
    program: Box<str>,
    filter: jaq_core::Filter<Kind>,
}

impl fmt::Debug for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Transform").field(&self.program()).finish()
    }
}

/// Compiles `program` with the jq standard library (jaq's `std` and `json`
/// definitions) available, on the calling thread, which must have
/// [`THREAD_STACK_BYTES`] of stack (the sandbox's worker thread does).
///
/// Fails with [`TransformError::Compile`] when the program is longer than
/// [`MAX_PROGRAM_BYTES`], nests deeper than [`MAX_PROGRAM_NESTING`], does not
/// parse, or uses a filter or variable that does not exist (including `input`,
/// `$ENV` and modules, which transformations do not have).
pub fn compile_on_this_thread(program: &str) -> Result<Transform, TransformError> {
    check_size(program)?;
    let compiled =
        panic::catch_unwind(AssertUnwindSafe(|| compile_here(program))).unwrap_or_else(|_| {
            Err(TransformError::Compile(
                "the jq compiler failed on this program".into(),
            ))
        })?;
    Ok(Transform(Arc::new(compiled)))
}

/// Runs `f` on a thread with [`THREAD_STACK_BYTES`] of stack: for tests, which
/// have no sandbox worker.
#[cfg(test)]
fn on_big_stack<T: Send>(
    f: impl FnOnce() -> Result<T, TransformError> + Send,
) -> Result<T, TransformError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(THREAD_STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(could_not_start)?
            .join()
            .unwrap_or_else(|_| Err(interpreter_failed()))
    })
}

/// [`compile_on_this_thread`] on a thread of its own (for tests).
#[cfg(test)]
pub(crate) fn compile(program: &str) -> Result<Transform, TransformError> {
    on_big_stack(|| compile_on_this_thread(program))
}

fn check_size(program: &str) -> Result<(), TransformError> {
    if program.len() > MAX_PROGRAM_BYTES {
        return Err(TransformError::Compile(format!(
            "the program is {} bytes long; at most {MAX_PROGRAM_BYTES} are allowed",
            program.len()
        )));
    }
    let nesting = syntax_nesting(program);
    if nesting > MAX_PROGRAM_NESTING {
        return Err(TransformError::Compile(format!(
            "the program nests brackets {nesting} levels deep; at most {MAX_PROGRAM_NESTING} are allowed"
        )));
    }
    Ok(())
}

impl Transform {
    /// The program's source text.
    pub fn program(&self) -> &str {
        &self.0.program
    }

    /// Runs the program on `input` and returns its first output; later outputs
    /// are not evaluated (so `repeat(.)` is fine). With a `limit`, a program still
    /// running after it stops with [`TransformError::Timeout`] at its next
    /// checkpoint; recursion that goes too deep is stopped with
    /// [`TransformError::Runtime`]. The calling thread must have
    /// [`THREAD_STACK_BYTES`] of stack (the sandbox's worker thread does).
    pub fn run_on_this_thread(
        &self,
        input: &serde_json::Value,
        limit: Option<Duration>,
    ) -> Result<serde_json::Value, TransformError> {
        let deadline = limit.map(|l| (Instant::now() + l, l.as_millis() as u64));
        evaluate(&self.0.filter, input, deadline)
    }

    /// [`Transform::run_on_this_thread`] on a thread of its own (for tests).
    #[cfg(test)]
    pub(crate) fn run(
        &self,
        input: &serde_json::Value,
        limit: Option<Duration>,
    ) -> Result<serde_json::Value, TransformError> {
        on_big_stack(|| self.run_on_this_thread(input, limit))
    }
}

/// `value` as compact JSON text, refused with [`TransformError::OutputTooLarge`]
/// past [`MAX_OUTPUT_BYTES`] without ever holding more than that.
pub fn to_bounded_json(value: &serde_json::Value) -> Result<String, TransformError> {
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + buf.len() > MAX_OUTPUT_BYTES {
                return Err(std::io::Error::other("too large"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    serde_json::to_writer(&mut out, value).map_err(|_| TransformError::OutputTooLarge)?;
    String::from_utf8(out.0).map_err(|e| TransformError::Output(e.to_string()))
}

#[cfg(test)]
fn could_not_start(e: std::io::Error) -> TransformError {
    TransformError::Runtime(format!("could not start the jq interpreter: {e}"))
}

fn interpreter_failed() -> TransformError {
    TransformError::Runtime("the jq interpreter failed on this program".into())
}

// ---------------------------------------------------------------------------
// Compiling

fn compile_here(program: &str) -> Result<Compiled, TransformError> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(
            &arena,
            File {
                code: program,
                path: (),
            },
        )
        .map_err(|errors| compile_error(program, load_messages(program, errors)))?;
    // `import "x" as $x;` binds a variable to a data file; there are none.
    load::import(&modules, |_| {
        Err("transformations cannot import data".into())
    })
    .map_err(|errors| compile_error(program, load_messages(program, errors)))?;
    let filter = Compiler::default()
        .with_funs(funs())
        .compile(modules)
        .map_err(|errors| {
            let messages = errors
                .into_iter()
                .flat_map(|(_file, errors)| errors)
                .map(|(name, undefined)| {
                    let what = match (name, &undefined) {
                        ("reduce" | "foreach", Undefined::Filter(_)) => {
                            format!("wrong number of arguments to `{name}`")
                        }
                        (_, Undefined::Filter(arity)) => {
                            format!("undefined filter `{name}/{arity}`")
                        }
                        (_, undefined) => format!("undefined {} `{name}`", undefined.as_str()),
                    };
                    located(program, what, name)
                })
                .collect();
            compile_error(program, messages)
        })?;
    Ok(Compiled {
        program: program.into(),
        filter,
    })
}

/// How deeply brackets, braces, parentheses and string interpolations nest in
/// `program`, plus the longest run of `-` in a row (`- - - 1` nests too).
/// Ignores strings and comments; unclosed brackets count.
fn syntax_nesting(program: &str) -> usize {
    #[derive(PartialEq)]
    enum Open {
        Bracket,
        Interpolation,
    }
    let mut open = Vec::new();
    let (mut minus_run, mut deepest) = (0usize, 0usize);
    let mut chars = program.chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '"' => in_string = false,
                '\\' => {
                    // An escape; `\(` opens an interpolation.
                    let escaped = chars.next();
                    if escaped == Some('(') {
                        open.push(Open::Interpolation);
                        in_string = false;
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '-' => minus_run += 1,
            c if c.is_whitespace() => {}
            _ => minus_run = 0,
        }
        match c {
            '"' => in_string = true,
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '(' | '[' | '{' => open.push(Open::Bracket),
            ')' | ']' | '}' => in_string = open.pop() == Some(Open::Interpolation),
            _ => {}
        }
        deepest = deepest.max(open.len() + minus_run);
    }
    deepest
}

fn load_messages(program: &str, errors: load::Errors<&str, ()>) -> Vec<String> {
    let mut messages = Vec::new();
    for (_file, error) in errors {
        match error {
            load::Error::Io(errors) => messages.extend(errors.into_iter().map(|(path, why)| {
                located(program, format!("cannot import \"{path}\": {why}"), path)
            })),
            load::Error::Lex(errors) => {
                messages.extend(errors.into_iter().map(|(expected, found)| {
                    // The lexer reports the rest of the program; its first
                    // character is the culprit.
                    let end = found.chars().next().map_or(0, char::len_utf8);
                    let found = &found[..end];
                    let what = match expected {
                        lex::Expect::Delim(open) => {
                            let opened = position(program, open)
                                .map_or(String::new(), |p| format!(" (opened at {p})"));
                            format!("unclosed `{open}`{opened}, found {}", describe(found))
                        }
                        lex::Expect::Token => format!("unexpected {}", describe(found)),
                        expected => {
                            format!("expected {}, found {}", expected.as_str(), describe(found))
                        }
                    };
                    located(program, what, found)
                }))
            }
            load::Error::Parse(errors) => {
                messages.extend(errors.into_iter().map(|(expected, found)| {
                    let expected = match expected {
                        parse::Expect::Just(token) => format!("`{token}`"),
                        expected => expected.as_str().to_string(),
                    };
                    let what = format!("expected {expected}, found {}", describe(found));
                    located(program, what, found)
                }))
            }
        }
    }
    messages
}

/// At most a few messages, on one line.
fn compile_error(program: &str, mut messages: Vec<String>) -> TransformError {
    const SHOWN: usize = 3;
    if messages.is_empty() {
        messages.push(format!("cannot compile `{}`", excerpt(program)));
    }
    let more = messages.len().saturating_sub(SHOWN);
    messages.truncate(SHOWN);
    let mut text = messages.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    TransformError::Compile(text)
}

/// `what`, followed by where `part` (a slice of `program`) starts.
fn located(program: &str, what: String, part: &str) -> String {
    match position(program, part) {
        Some(at) => format!("{what} at {at}"),
        None => what,
    }
}

/// "line L, column C" (both from 1) of where `part`, a slice of `program`,
/// starts. `None` if it is not a slice of `program` (e.g. it is in the prelude).
fn position(program: &str, part: &str) -> Option<String> {
    let offset = (part.as_ptr() as usize).checked_sub(program.as_ptr() as usize)?;
    let before = program.get(..offset)?;
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    Some(format!("line {line}, column {column}"))
}

fn describe(found: &str) -> String {
    if found.is_empty() {
        "end of program".into()
    } else {
        format!("`{}`", excerpt(found))
    }
}

/// The start of `text`: its first line, at most 24 characters.
fn excerpt(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut short: String = line.chars().take(24).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

// ---------------------------------------------------------------------------
// Running

/// The kind of data jaq runs on: JSON values, and [`Checked`] as the context
/// data every step clones.
struct Kind;

impl DataT for Kind {
    type V<'a> = Val;
    type Data<'a> = Checked<'a>;
}

/// The interpreter's look-up table plus the [`Guard`]; cloning it is the
/// checkpoint.
struct Checked<'a> {
    lut: &'a jaq_core::Lut<Kind>,
    guard: &'a Guard,
}

impl Clone for Checked<'_> {
    fn clone(&self) -> Self {
        self.guard.check();
        Self {
            lut: self.lut,
            guard: self.guard,
        }
    }
}

impl<'a> HasLut<'a, Kind> for Checked<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<Kind> {
        self.lut
    }
}

/// Why a checkpoint stopped the program. Raised with `resume_unwind` (which
/// skips the panic hook, so nothing is printed) and caught in [`evaluate`].
#[derive(Debug)]
enum Stop {
    TooDeep,
    OutOfTime,
}

/// The limits of one run. Lives on the stack of the thread that runs it.
struct Guard {
    stack_base: usize,
    steps: Cell<u32>,
    deadline: Option<Instant>,
}

impl Guard {
    fn new(deadline: Option<Instant>) -> Self {
        Self {
            stack_base: stack_address(),
            steps: Cell::new(0),
            deadline,
        }
    }

    fn check(&self) {
        if self.stack_base.abs_diff(stack_address()) > INTERPRETER_STACK_BYTES {
            panic::resume_unwind(Box::new(Stop::TooDeep));
        }
        let steps = self.steps.get().wrapping_add(1);
        self.steps.set(steps);
        if steps.is_multiple_of(CLOCK_EVERY) && self.deadline.is_some_and(|d| Instant::now() >= d) {
            panic::resume_unwind(Box::new(Stop::OutOfTime));
        }
    }
}

/// Roughly where the stack pointer is: the address of a local.
#[inline(always)]
fn stack_address() -> usize {
    let probe = 0u8;
    std::hint::black_box(&probe) as *const u8 as usize
}

/// Runs `filter` on `input` on the current thread, which must have
/// [`THREAD_STACK_BYTES`] of stack.
/// `deadline` is the instant to stop at and the limit it stands for, in ms.
fn evaluate(
    filter: &jaq_core::Filter<Kind>,
    input: &serde_json::Value,
    deadline: Option<(Instant, u64)>,
) -> Result<serde_json::Value, TransformError> {
    let guard = Guard::new(deadline.map(|(at, _)| at));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let data = Checked {
            lut: &filter.lut,
            guard: &guard,
        };
        let mut outputs = filter
            .id
            .run((Ctx::<Kind>::new(data, Vars::new([])), to_val(input)));
        let first = outputs.next();
        drop(outputs);
        match first {
            None => Err(TransformError::NoOutput),
            Some(Err(exception)) => Err(runtime_error(exception)),
            Some(Ok(output)) => {
                let json = to_json(&output, 0);
                drop_flat(output);
                json
            }
        }
    }));
    match outcome {
        Ok(result) => result,
        Err(payload) => match payload.downcast::<Stop>().map(|stop| *stop) {
            Ok(Stop::OutOfTime) => Err(TransformError::Timeout {
                limit_ms: deadline.map_or(0, |(_, ms)| ms),
            }),
            Ok(Stop::TooDeep) => Err(TransformError::Runtime(
                "recursion too deep (does a recursive definition never stop?)".into(),
            )),
            Err(_) => Err(interpreter_failed()),
        },
    }
}

fn runtime_error(exception: Exn<'_, Val>) -> TransformError {
    let error = match exception.get_err() {
        Ok(error) => error,
        Err(exception) => {
            return TransformError::Runtime(match exception.get_halt() {
                Ok(code) => format!("the program called halt (exit code {code})"),
                Err(_) => "the jq interpreter failed on this program".into(),
            })
        }
    };
    // `error("nope")` reads best as `nope`, other values as JSON.
    let message = match error.into_val() {
        Val::TStr(text) | Val::BStr(text) => String::from_utf8_lossy(&text).into_owned(),
        other => other.to_string(),
    };
    TransformError::Runtime(truncate(message, MAX_MESSAGE_BYTES))
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

// ---------------------------------------------------------------------------
// Native filters that differ from jaq's

/// jaq's core, `std` and `json` native filters, with the replacements below.
fn funs() -> impl Iterator<Item = Fun<Kind>> {
    type Native = (&'static str, usize, jaq_core::RunPtr<Kind>);
    const REPLACED: [Native; 5] = [
        ("range", 3, guarded_range),
        ("fromjson", 0, guarded_fromjson),
        ("env", 0, |_| {
            box_once(Ok(Val::obj(jaq_json::Map::default())))
        }),
        ("debug_empty", 0, |_| Box::new(std::iter::empty())),
        ("stderr_empty", 0, |_| Box::new(std::iter::empty())),
    ];
    let replaced = |(name, args, _): &Fun<Kind>| {
        REPLACED
            .iter()
            .any(|(n, arity, _)| n == name && *arity == args.len())
    };
    jaq_core::funs::<Kind>()
        .chain(jaq_std::funs::<Kind>())
        .chain(jaq_json::funs::<Kind>())
        .filter(move |f| !replaced(f))
        .chain(
            REPLACED
                .into_iter()
                .map(|(name, arity, run)| native::run::<Kind>((name, v(arity), run))),
        )
}

/// `range($from; $to; $by)` as in jaq, with a checkpoint per value.
fn guarded_range<'a>(mut cv: Cv<'a, Kind>) -> ValXs<'a, Val> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let guard = cv.0.data().guard;
    let by = cv.0.pop_var();
    let to = cv.0.pop_var();
    let from = cv.0.pop_var();
    let direction = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    let mut next: Result<Val, Exn<'a, Val>> = Ok(from);
    Box::new(std::iter::from_fn(move || {
        guard.check();
        match next.clone() {
            Ok(x) => match direction {
                Greater => x < to,
                Less => x > to,
                Equal => x != to,
            }
            .then(|| std::mem::replace(&mut next, (x + by.clone()).map_err(Exn::from))),
            Err(e) => {
                next = Ok(to.clone());
                Some(Err(e))
            }
        }
    }))
}

/// `fromjson` as in jaq, but refusing text nested more than
/// [`MAX_FROMJSON_DEPTH`] deep: jaq's JSON parser recurses once per level.
fn guarded_fromjson<'a>(cv: Cv<'a, Kind>) -> ValXs<'a, Val> {
    let fail = |message: String| box_once(Err(Exn::from(jaq_json::Error::str(message))));
    let text = match cv.1.try_as_utf8_bytes_owned() {
        Ok(text) => text,
        Err(e) => return box_once(Err(Exn::from(e))),
    };
    if json_nesting(&text) > MAX_FROMJSON_DEPTH {
        return fail(format!(
            "cannot parse JSON nested more than {MAX_FROMJSON_DEPTH} levels deep"
        ));
    }
    // The parser does not advance past an error, so stop at the first one.
    let mut values = Vec::new();
    for value in jaq_json::read::parse_many(&text) {
        match value {
            Ok(value) => values.push(Ok(value)),
            Err(e) => {
                let shown = truncate(String::from_utf8_lossy(&text).into_owned(), 64);
                let message = format!("cannot parse {shown:?} as JSON: {e}");
                values.push(Err(Exn::from(jaq_json::Error::str(message))));
                break;
            }
        }
    }
    Box::new(values.into_iter())
}

/// How deeply brackets and braces nest in JSON text, ignoring those in strings.
/// Over-counts (never under-counts) for text that is not JSON.
fn json_nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in text {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

// ---------------------------------------------------------------------------
// Converting values

fn to_val(value: &serde_json::Value) -> Val {
    use serde_json::Value;
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => Val::Num(if let Some(i) = n.as_i64() {
            Num::from_integral(i)
        } else if let Some(u) = n.as_u64() {
            Num::from_integral(u)
        } else {
            Num::Float(n.as_f64().unwrap_or(f64::NAN))
        }),
        Value::String(s) => Val::from(s.clone()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(fields) => Val::obj(
            fields
                .iter()
                .map(|(k, v)| (Val::from(k.clone()), to_val(v)))
                .collect(),
        ),
    }
}

fn to_json(value: &Val, depth: usize) -> Result<serde_json::Value, TransformError> {
    use serde_json::Value;
    if depth > MAX_OUTPUT_DEPTH {
        return Err(TransformError::Output(format!(
            "it nests more than {MAX_OUTPUT_DEPTH} levels deep"
        )));
    }
    Ok(match value {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => Value::Number(number_to_json(n)?),
        // Text that is not valid UTF-8 (jaq keeps it as bytes) and byte strings
        // (from `tobytes`) are sent as text, invalid sequences replaced.
        Val::TStr(text) | Val::BStr(text) => {
            Value::String(String::from_utf8_lossy(text).into_owned())
        }
        Val::Arr(items) => Value::Array(
            items
                .iter()
                .map(|item| to_json(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Val::Obj(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, field)| match key {
                    Val::TStr(k) | Val::BStr(k) => Ok((
                        String::from_utf8_lossy(k).into_owned(),
                        to_json(field, depth + 1)?,
                    )),
                    other => Err(TransformError::Output(format!(
                        "an object key is not a string: {}",
                        truncate(other.to_string(), 64)
                    ))),
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// Integers that fit in 64 bits stay exact; larger ones and decimals become the
/// nearest double (as in jq 1.6). NaN and infinities have no JSON form.
fn number_to_json(n: &Num) -> Result<serde_json::Number, TransformError> {
    let not_finite = || {
        TransformError::Output(format!(
            "it contains the number {n}, which JSON cannot represent"
        ))
    };
    match n {
        Num::Int(i) => Ok(match i64::try_from(*i) {
            Ok(i) => i.into(),
            Err(_) => serde_json::Number::from_f64(*i as f64).ok_or_else(not_finite)?,
        }),
        Num::Float(x) => serde_json::Number::from_f64(*x).ok_or_else(not_finite),
        Num::BigInt(_) | Num::Dec(_) => {
            let text = n.to_string();
            if let Ok(i) = text.parse::<i64>() {
                Ok(i.into())
            } else if let Ok(u) = text.parse::<u64>() {
                Ok(u.into())
            } else {
                text.parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .ok_or_else(not_finite)
            }
        }
    }
}

/// Drops a value without recursing, so that a deeply nested output cannot
/// overflow the stack on its way out.
fn drop_flat(value: Val) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Val::Arr(items) => {
                if let Ok(items) = jaq_json::Rc::try_unwrap(items) {
                    pending.extend(items);
                }
            }
            Val::Obj(fields) => {
                if let Ok(fields) = jaq_json::Rc::try_unwrap(fields) {
                    pending.extend(fields.into_iter().flat_map(|(k, v)| [k, v]));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(program: &str, input: serde_json::Value) -> Result<serde_json::Value, TransformError> {
        compile(program).unwrap().run(&input, None)
    }

    #[test]
    fn transform_is_send_sync_and_cheap_to_clone() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<Transform>();
    }

    #[test]
    fn dot_passes_the_payload_through() {
        let payload = json!({"message": {"text": "hi"}, "n": [1, 2.5, null, true]});
        assert_eq!(run(".", payload.clone()), Ok(payload));
    }

    #[test]
    fn an_object_construction_reshapes_the_payload() {
        let payload = json!({"message": {"text": "hello"}, "channel": "general", "x": 1});
        assert_eq!(
            run("{text: .message.text, channel}", payload),
            Ok(json!({"text": "hello", "channel": "general"}))
        );
    }

    #[test]
    fn the_standard_library_is_available() {
        let payload = json!({"items": [{"price": 2}, {"price": 3}, {"price": 5}]});
        assert_eq!(run(".items | map(.price) | add", payload), Ok(json!(10)));
        assert_eq!(
            run(
                "[.items[].price | tostring] | join(\",\")",
                json!({"items": [{"price": 1}, {"price": 2}]})
            ),
            Ok(json!("1,2"))
        );
    }

    #[test]
    fn error_gives_a_runtime_error_with_the_message() {
        assert_eq!(
            run(r#"error("nope")"#, json!(null)),
            Err(TransformError::Runtime("nope".into()))
        );
        let Err(TransformError::Runtime(message)) = run(".a + 1", json!({"a": "x"})) else {
            panic!("adding a string and a number should fail");
        };
        assert!(message.contains("cannot"), "{message}");
    }

    #[test]
    fn empty_gives_no_output() {
        assert_eq!(run("empty", json!(1)), Err(TransformError::NoOutput));
        assert_eq!(
            TransformError::NoOutput.to_string(),
            "the program produced no output"
        );
    }

    #[test]
    fn only_the_first_output_is_used() {
        assert_eq!(run("1, 2", json!(null)), Ok(json!(1)));
        assert_eq!(
            run("1, error(\"never evaluated\")", json!(null)),
            Ok(json!(1))
        );
    }

    #[test]
    fn an_endless_generator_stops_after_its_first_output() {
        assert_eq!(run("repeat(.)", json!({"a": 1})), Ok(json!({"a": 1})));
    }

    #[test]
    fn a_syntax_error_says_what_is_wrong_and_where() {
        let Err(TransformError::Compile(message)) = compile(".message |") else {
            panic!("should not compile");
        };
        assert!(message.contains("expected term"), "{message}");
        assert!(message.contains("end of program"), "{message}");
        assert!(message.contains("line 1, column 11"), "{message}");

        let Err(TransformError::Compile(message)) = compile("{text: .a,\n  x: (.b}") else {
            panic!("should not compile");
        };
        assert!(message.contains("line 2"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn an_undefined_function_does_not_compile() {
        let Err(TransformError::Compile(message)) = compile(".items | frobnicate") else {
            panic!("should not compile");
        };
        assert_eq!(
            message,
            "undefined filter `frobnicate/0` at line 1, column 10"
        );
        assert!(
            matches!(compile("$nope"), Err(TransformError::Compile(m)) if m.contains("undefined variable"))
        );
        assert!(matches!(compile("input"), Err(TransformError::Compile(_))));
        assert!(matches!(compile("$ENV"), Err(TransformError::Compile(_))));
        assert!(matches!(
            compile(r#"include "x"; ."#),
            Err(TransformError::Compile(_))
        ));
        assert!(matches!(
            compile(r#"import "x" as $x; ."#),
            Err(TransformError::Compile(_))
        ));
    }

    #[test]
    fn programs_longer_than_64_kib_or_nested_too_deeply_are_refused() {
        let long = format!(".{}", " ".repeat(MAX_PROGRAM_BYTES));
        assert!(matches!(compile(&long), Err(TransformError::Compile(m)) if m.contains("bytes")));
        // Would overflow the compiler's stack and abort the process.
        for nested in [
            format!("{}1{}", "[".repeat(30_000), "]".repeat(30_000)),
            format!("{}1", "-".repeat(60_000)),
            format!("{}1", "(".repeat(60_000)),
            format!("\"{}\"", r#"\(""#.repeat(15_000)),
        ] {
            assert!(
                matches!(compile(&nested), Err(TransformError::Compile(m)) if m.contains("nests"))
            );
        }
        // Brackets in strings and comments do not count.
        let program = format!("\"{}\" # {}\n| length", "[".repeat(1000), "(".repeat(1000));
        assert_eq!(run(&program, json!(null)), Ok(json!(1000)));
        assert_eq!(
            run(r#""a\(1 + (2))b" | [.]"#, json!(null)),
            Ok(json!(["a3b"]))
        );
    }

    #[test]
    fn a_program_that_never_ends_times_out_quickly() {
        for program in [
            "last(range(infinite))",
            "until(false; .)",
            "def f: f; f",
            "[range(1e15)]",
        ] {
            let transform = compile(program).unwrap();
            let started = Instant::now();
            let result = transform.run(&json!(null), Some(Duration::from_millis(200)));
            assert_eq!(
                result,
                Err(TransformError::Timeout { limit_ms: 200 }),
                "{program}"
            );
            assert!(started.elapsed() < Duration::from_secs(1), "{program}");
        }
        assert_eq!(
            TransformError::Timeout { limit_ms: 1000 }.to_string(),
            "the jq program ran longer than 1 s"
        );
    }

    #[test]
    fn a_bounded_run_returns_the_output() {
        let transform = compile(".a").unwrap();
        let result = transform.run(&json!({"a": [1]}), Some(Duration::from_secs(5)));
        assert_eq!(result, Ok(json!([1])));
    }

    #[test]
    fn output_is_json_text_of_at_most_a_mebibyte() {
        assert_eq!(
            to_bounded_json(&json!({"a": [1, "x"]})).unwrap(),
            r#"{"a":[1,"x"]}"#
        );
        let big = json!("x".repeat(MAX_OUTPUT_BYTES));
        assert_eq!(to_bounded_json(&big), Err(TransformError::OutputTooLarge));
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_ms(250), "250 ms");
        assert_eq!(human_ms(1000), "1 s");
        assert_eq!(human_ms(1500), "1.5 s");
    }

    #[test]
    fn deep_recursion_is_an_error_not_a_crash() {
        for program in [
            "def f: 1 + f; f",
            "def f: [f]; f",
            "def f: f | f; f",
            "def f: {a: f}; f",
        ] {
            let Err(TransformError::Runtime(message)) = run(program, json!(null)) else {
                panic!("{program} should fail");
            };
            assert!(
                message.contains("recursion too deep"),
                "{program}: {message}"
            );
        }
        // Deep but finite recursion completes.
        let program = "def f: if . < 2000 then (. + 1 | f) + 0 else . end; f";
        assert_eq!(run(program, json!(0)), Ok(json!(2000)));
    }

    #[test]
    fn unicode_strings_and_big_integers_round_trip() {
        let payload = json!({
            "text": "héllo wörld — 你好 🎉 \u{0} \"quoted\" \\ \n",
            "clé 🔑": true,
            "max": u64::MAX,
            "min": i64::MIN,
            "big": 9_007_199_254_740_993_u64,
            "float": 1.5,
            "nested": [[{"a": null}]],
        });
        assert_eq!(run(".", payload.clone()), Ok(payload.clone()));
        assert_eq!(
            run("{max, min, big}", payload),
            Ok(json!({
                "max": u64::MAX, "min": i64::MIN, "big": 9_007_199_254_740_993_u64
            }))
        );
        assert_eq!(
            run("18446744073709551615", json!(null)),
            Ok(json!(u64::MAX))
        );
        assert_eq!(
            run(".x + 1", json!({"x": i64::MAX})),
            Ok(json!(9_223_372_036_854_775_808_u64))
        );
        assert_eq!(run("\"é\" | length", json!(null)), Ok(json!(1)));
    }

    #[test]
    fn outputs_that_are_not_json_are_refused() {
        for program in ["infinite", "nan", "[1, -infinite]"] {
            assert!(
                matches!(run(program, json!(null)), Err(TransformError::Output(_))),
                "{program}"
            );
        }
        let deep = "reduce range(1000) as $i (null; [.])";
        assert!(
            matches!(run(deep, json!(null)), Err(TransformError::Output(m)) if m.contains("levels deep"))
        );
        assert!(run("{(1): 2}", json!(null)).is_err());
    }

    #[test]
    fn the_environment_and_the_process_are_out_of_reach() {
        assert_eq!(run("env", json!(null)), Ok(json!({})));
        assert_eq!(run("debug | stderr | .a", json!({"a": 1})), Ok(json!(1)));
        // `halt` would otherwise exit the server.
        assert!(
            matches!(run("halt", json!(null)), Err(TransformError::Runtime(m)) if m.contains("halt"))
        );
        assert!(matches!(
            run(r#""bye" | halt_error(1)"#, json!(null)),
            Err(TransformError::Runtime(_))
        ));
    }

    #[test]
    fn fromjson_refuses_very_deep_text() {
        assert_eq!(run(r#""[[1]]" | fromjson"#, json!(null)), Ok(json!([[1]])));
        let deep = r#""[" * 1000000 | fromjson"#;
        assert!(
            matches!(run(deep, json!(null)), Err(TransformError::Runtime(m)) if m.contains("nested"))
        );
        assert!(matches!(
            run(r#""{" | fromjson"#, json!(null)),
            Err(TransformError::Runtime(_))
        ));
        // Invalid text yields one error, not an endless stream of them.
        assert!(
            matches!(run(r#""x" | tonumber"#, json!(null)), Err(TransformError::Runtime(m)) if m.contains("JSON"))
        );
        assert_eq!(
            run(r#"["1 [2]" | fromjson]"#, json!(null)),
            Ok(json!([1, [2]]))
        );
    }
}
