//! What the server and a sandbox worker say to each other over the worker's
//! stdin and stdout: frames of a 4-byte little-endian length and that many bytes
//! of JSON. One request, then one response; nothing else is ever written to the
//! pipes, so a worker that dies mid-answer shows as a short read.

use std::borrow::Cow;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::dispatch::transform::{TransformError, MAX_OUTPUT_BYTES, MAX_PROGRAM_BYTES};

/// The largest request a worker reads: a program and a payload (the API's body
/// limit is far below this), with room for JSON escaping.
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The largest response the server reads: an output, escaped, and a message.
pub const MAX_RESPONSE_BYTES: usize = 2 * MAX_OUTPUT_BYTES + MAX_PROGRAM_BYTES;

/// One request. A plain struct, not a tagged enum: serde buffers tagged enums,
/// and the payload is passed through as raw JSON text without being parsed here.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    pub op: Op,
    #[serde(borrow)]
    pub program: Cow<'a, str>,
    /// The payload, for [`Op::Run`].
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub input: Option<&'a RawValue>,
    /// The wall-clock bound, for [`Op::Run`].
    #[serde(default)]
    pub limit_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Op {
    /// Compile the program (and keep it for later runs); answers [`Response::Compiled`].
    Compile,
    /// Run the program on the input; answers [`Response::Output`].
    Run,
}

impl<'a> Request<'a> {
    pub fn compile(program: &'a str) -> Self {
        Self {
            op: Op::Compile,
            program: Cow::Borrowed(program),
            input: None,
            limit_ms: 0,
        }
    }

    pub fn run(program: &'a str, input: &'a RawValue, limit_ms: u64) -> Self {
        Self {
            op: Op::Run,
            program: Cow::Borrowed(program),
            input: Some(input),
            limit_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Response {
    Compiled,
    /// The program's first output, as JSON text.
    Output(Box<RawValue>),
    Failed(TransformError),
}

/// Reads one frame; `None` at a clean end of input (the other side closed).
pub fn read_frame(from: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match from.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = frame_len(len, max)?;
    let mut body = vec![0; len];
    from.read_exact(&mut body)?;
    Ok(Some(body))
}

pub fn write_frame(to: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("frame too large"))?;
    to.write_all(&len.to_le_bytes())?;
    to.write_all(body)?;
    to.flush()
}

/// The length a frame announces, refused past `max`.
pub fn frame_len(header: [u8; 4], max: usize) -> io::Result<usize> {
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over the limit of {max}"),
        ));
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_written_and_the_end_is_not_an_error() {
        let mut pipe = Vec::new();
        write_frame(&mut pipe, br#"{"op":"compile","program":"."}"#).unwrap();
        write_frame(&mut pipe, b"").unwrap();
        let mut reader = &pipe[..];
        let first = read_frame(&mut reader, 1024).unwrap().unwrap();
        let request: Request = serde_json::from_slice(&first).unwrap();
        assert_eq!((request.op, &*request.program), (Op::Compile, "."));
        assert_eq!(read_frame(&mut reader, 1024).unwrap(), Some(vec![]));
        assert_eq!(read_frame(&mut reader, 1024).unwrap(), None);
    }

    #[test]
    fn an_oversized_or_cut_frame_is_an_error() {
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &[b'x'; 100]).unwrap();
        assert!(read_frame(&mut &pipe[..], 99).is_err());
        assert!(read_frame(&mut &pipe[..50], 1000).is_err());
    }

    #[test]
    fn a_run_request_carries_the_payload_as_it_is() {
        let input = RawValue::from_string(r#"{"a": [1, 2.50]}"#.into()).unwrap();
        let request = Request::run(r#"."a\"b""#, &input, 1000);
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(
            text,
            r#"{"op":"run","program":".\"a\\\"b\"","input":{"a": [1, 2.50]},"limitMs":1000}"#
        );
        let back: Request = serde_json::from_str(&text).unwrap();
        assert_eq!(back.program, r#"."a\"b""#);
        assert_eq!(back.input.unwrap().get(), r#"{"a": [1, 2.50]}"#);
        let failed = Response::Failed(TransformError::Memory { limit_mib: 256 });
        let back: Response =
            serde_json::from_str(&serde_json::to_string(&failed).unwrap()).unwrap();
        assert!(matches!(
            back,
            Response::Failed(TransformError::Memory { limit_mib: 256 })
        ));
    }
}
