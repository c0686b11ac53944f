//! The transformation API the engine and the REST API use (see [`super::transform`]).
pub use super::transform::{compile, Transform, TransformError};
