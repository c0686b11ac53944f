//! A space's retention (docs D10), as the REST API (`PATCH /v1/projects/{project}`) and
//! the console's spaces page set it: a duration such as `30d` (one second to ten years),
//! or none to go back to the plan's. Which retention applies is
//! [`crate::domain::retention_for`]; the purge is [`crate::retention`].

use super::audit::Author;
use super::OpsError;
use crate::domain::{retention_for, AuditAction, PerPlan, Retention, Space, SpaceId};
use crate::storage::Storage;

/// The code of a refused retention (the API's 422).
pub const INVALID_RETENTION: &str = "invalid_retention";

/// Reads a retention: a duration from one second to ten years.
pub fn parse(raw: &str) -> Result<Retention, OpsError> {
    raw.parse::<Retention>().map_err(|e| OpsError::Invalid {
        code: INVALID_RETENTION,
        message: format!("retention: {e}"),
    })
}

/// Reads a retention typed in a form: empty (after trimming) is none, the plan's.
pub fn parse_optional(raw: &str) -> Result<Option<Retention>, OpsError> {
    match raw.trim() {
        "" => Ok(None),
        text => parse(text).map(Some),
    }
}

/// Sets the space's own retention (`None`: its plan's), recorded as `by`'s change, and
/// answers the space as it now is.
pub async fn set(
    store: &dyn Storage,
    space_id: SpaceId,
    retention: Option<Retention>,
    by: &Author,
) -> Result<Space, OpsError> {
    let detail = serde_json::json!({ "retention": retention.map(|r| r.to_string()) });
    let entry = by.entry(
        AuditAction::SpaceRetention,
        Some(space_id),
        space_id,
        detail,
        crate::clock::now_ms(),
    );
    store
        .set_space_retention(space_id, retention, Some(&entry))
        .await?;
    Ok(store.get_space(space_id).await?)
}

/// The retention that applies to the space now.
pub fn effective(space: &Space, per_plan: &PerPlan<Retention>) -> Retention {
    retention_for(space.retention, space.plan, per_plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_retention_is_the_plans_and_a_bad_one_is_refused_by_name() {
        assert_eq!(parse_optional("  ").unwrap(), None);
        assert_eq!(parse_optional(" 30d ").unwrap(), Some(Retention::days(30)));
        assert!(parse("").is_err());
        match parse("forever") {
            Err(OpsError::Invalid { code, message }) => {
                assert_eq!(code, INVALID_RETENTION);
                assert!(message.starts_with("retention: "), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
