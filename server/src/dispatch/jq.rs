//! TEMPORARY stand-in for `transform` while it is being written; replaced by a re-export.
#[derive(Clone)]
pub struct Transform;
#[derive(Debug, thiserror::Error)]
#[error("transformations are not available yet")]
pub struct TransformError;
pub fn compile(_: &str) -> Result<Transform, TransformError> {
    Err(TransformError)
}
impl Transform {
    pub async fn run_bounded(&self, v: serde_json::Value, _: std::time::Duration) -> Result<serde_json::Value, TransformError> {
        Ok(v)
    }
}
