//! Payload filters (docs §2.12): a destination's optional jq expression, run on each
//! event's payload when the event is published, in the sandbox where transformations
//! run. Every way of publishing (the REST API, channel messages from incoming hooks,
//! bots and the channels API, the console's test events) asks [`verdicts`] before it
//! writes, and hands the answer to storage, so the write transaction never waits on a
//! program.
//!
//! The rule ([`verdict`]): only `true` lets the event through; `false` and `null` keep
//! it out (no delivery; the destination's `filteredEvents` grows); anything else — an
//! error, no output, another value, a program stopped by the sandbox's limits — fails
//! the destination's delivery with class `transformation` and a message that says the
//! filter failed and why.
//!
//! A space without filtered destinations costs one look-up on an index of filtered
//! destinations that holds none of its rows, and no program runs. A destination changed
//! between the verdicts and the write is judged by the filter it had when the verdicts
//! were made (or, if it had none, gets its delivery): the same race as a publish
//! that crosses a change of event types.

use serde_json::value::RawValue;
use serde_json::Value;

use super::OpsError;
use crate::dispatch::transform::TransformError;
use crate::domain::*;
use crate::sandbox::Sandbox;
use crate::storage::{FilterVerdicts, Storage, StorageError};

/// The largest sample payload the console's "try it" box takes, in bytes.
pub const MAX_SAMPLE_BYTES: usize = 64 * 1024;

/// What runs a filter (or a transformation) on a payload: in the server, the sandbox.
pub trait ProgramRun: Sync {
    /// The program's first output as JSON text.
    fn run(
        &self,
        program: &str,
        input: &RawValue,
    ) -> impl std::future::Future<Output = Result<String, TransformError>> + Send;
}

impl ProgramRun for Sandbox {
    async fn run(&self, program: &str, input: &RawValue) -> Result<String, TransformError> {
        Sandbox::run(self, program, input).await
    }
}

/// What a filter says of one payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `true`: the event is delivered.
    Passes,
    /// `false` or `null`: no delivery; counted in `filteredEvents`.
    FilteredOut,
    /// The filter failed; the message says why (shown on the failed delivery).
    Failed(String),
}

/// The rule: the verdict of a filter's run (its first output as JSON text, or how it
/// failed). `Unavailable` (the sandbox could not run it at all) is not the filter's
/// fault and is left to the caller.
pub fn verdict(run: Result<&str, &TransformError>) -> Verdict {
    match run {
        Ok(output) => match output.trim() {
            "true" => Verdict::Passes,
            "false" | "null" => Verdict::FilteredOut,
            other => Verdict::Failed(format!(
                "the filter failed: it produced {}, not true, false or null",
                shortened(other, 100)
            )),
        },
        Err(e) => Verdict::Failed(format!("the filter failed: {e}")),
    }
}

/// `text` cut to `max` characters, with `…` when it was longer.
fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

/// Runs `filter` on `input` and judges it; `None` when the sandbox is unavailable.
async fn judge(programs: &impl ProgramRun, filter: &str, input: &RawValue) -> Option<Verdict> {
    match programs.run(filter, input).await {
        Err(TransformError::Unavailable(_)) => None,
        run => Some(verdict(run.as_deref())),
    }
}

/// The verdicts, for storage: the destinations kept out and the failed ones.
pub fn collect(verdicts: impl IntoIterator<Item = (DestinationId, Verdict)>) -> FilterVerdicts {
    let mut out = FilterVerdicts::default();
    for (d, v) in verdicts {
        match v {
            Verdict::Passes => {}
            Verdict::FilteredOut => out.filtered_out.push(d),
            Verdict::Failed(why) => out.failed.push((d, why)),
        }
    }
    out
}

/// Runs the filters of the given destinations (those without one pass) on `event`'s
/// payload, one after the other.
pub async fn verdicts_of(
    destinations: &[Destination],
    programs: &impl ProgramRun,
    event: &Event,
) -> Result<FilterVerdicts, OpsError> {
    let filtered: Vec<(&Destination, &str)> = destinations
        .iter()
        .filter_map(|d| Some((d, d.filter.as_deref()?)))
        .collect();
    if filtered.is_empty() {
        return Ok(FilterVerdicts::default());
    }
    // Serialized once for all the filters, and handed to the workers as it is.
    let input = serde_json::value::to_raw_value(&event.payload)
        .map_err(|e| OpsError::Internal(anyhow::Error::new(e).context("serialising a payload")))?;
    let mut said = Vec::with_capacity(filtered.len());
    for (d, filter) in filtered {
        let v = judge(programs, filter, &input).await.ok_or_else(|| {
            StorageError::Unavailable("the sandbox that runs filters is unavailable".into())
        })?;
        said.push((d.id, v));
    }
    Ok(collect(said))
}

/// The verdicts of the filters of `event`'s space's active destinations that subscribe
/// to its type: what publishing hands to storage with the event.
pub async fn verdicts(
    store: &dyn Storage,
    programs: &impl ProgramRun,
    event: &Event,
) -> Result<FilterVerdicts, OpsError> {
    let filtering = store.list_filtered_destinations(event.space_id).await?;
    verdicts_among(filtering, programs, event).await
}

/// [`verdicts`] with the space's active filtering destinations already read (as
/// [`crate::storage::EventStore::publish_checks`] reads them with the schema's version).
pub async fn verdicts_among(
    mut filtering: Vec<Destination>,
    programs: &impl ProgramRun,
    event: &Event,
) -> Result<FilterVerdicts, OpsError> {
    filtering.retain(|d| d.subscribes_to(&event.event_type));
    verdicts_of(&filtering, programs, event).await
}

/// What the console's "try it" box shows: the filter's verdict and the
/// transformation's output (or why it failed), each `None` when the form has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    pub filter: Option<Verdict>,
    pub transformed: Option<Result<String, String>>,
}

/// Runs the form's filter and transformation (as typed, not saved) on a sample
/// payload, as publishing and the engine would. A blank program is none; the sample
/// must be JSON of at most [`MAX_SAMPLE_BYTES`].
pub async fn try_it(
    programs: &impl ProgramRun,
    filter: &str,
    transformation: &str,
    sample: &str,
) -> Result<Tried, OpsError> {
    if sample.len() > MAX_SAMPLE_BYTES {
        return Err(OpsError::invalid(
            "sample_too_large",
            format!(
                "the sample payload may have at most {} KiB",
                MAX_SAMPLE_BYTES / 1024
            ),
        ));
    }
    let parsed: Value = serde_json::from_str(sample).map_err(|e| {
        OpsError::invalid(
            "invalid_sample",
            format!("the sample payload is not JSON: {e}"),
        )
    })?;
    let input = serde_json::value::to_raw_value(&parsed)
        .map_err(|e| OpsError::Internal(anyhow::Error::new(e).context("serialising a payload")))?;
    let unavailable = || {
        OpsError::Storage(StorageError::Unavailable(
            "the sandbox is unavailable; try again".into(),
        ))
    };
    let filter = match filter.trim() {
        "" => None,
        _ => Some(
            judge(programs, filter, &input)
                .await
                .ok_or_else(unavailable)?,
        ),
    };
    let transformed = match transformation.trim() {
        "" => None,
        _ => match programs.run(transformation, &input).await {
            Err(TransformError::Unavailable(_)) => return Err(unavailable()),
            Ok(output) => Some(Ok(output)),
            Err(e) => Some(Err(e.to_string())),
        },
    };
    Ok(Tried {
        filter,
        transformed,
    })
}

/// The real interpreter, in-process: for unit tests, which cannot start sandbox
/// workers (the integration tests and the server always use the sandbox).
#[cfg(test)]
pub(crate) struct InProcess;

#[cfg(test)]
impl ProgramRun for InProcess {
    async fn run(&self, program: &str, input: &RawValue) -> Result<String, TransformError> {
        use crate::dispatch::transform;
        let input: Value = serde_json::from_str(input.get()).expect("JSON");
        let output =
            transform::compile(program)?.run(&input, Some(std::time::Duration::from_secs(1)))?;
        transform::to_bounded_json(&output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(payload: Value) -> Event {
        Event {
            id: EventId::new(),
            space_id: SpaceId::new(),
            event_type: "order.created".into(),
            payload,
            created_at: 1,
            deliver_at: None,
        }
    }

    fn destination(filter: Option<&str>) -> Destination {
        Destination {
            id: DestinationId::new(),
            space_id: SpaceId::new(),
            url: "https://example.com".into(),
            description: String::new(),
            event_types: None,
            secret: "whsec_x".into(),
            previous_secret: None,
            previous_secret_expires_at: None,
            rate_limit: None,
            max_attempts: 8,
            timeout_seconds: 30,
            retry_policy: json!({"preset": "partyflow"}),
            transformation: None,
            status: DestinationStatus::Active,
            consecutive_dead_letters: 0,
            skipped_events: 0,
            disabled_reason: None,
            created_at: 1,
            updated_at: 1,
            filter: filter.map(str::to_owned),
            filtered_events: 0,
            ordering: DeliveryOrdering::Unordered,
            headers: CustomHeaders::default(),
            name: None,
        }
    }

    #[test]
    fn only_true_passes_false_and_null_keep_out_and_the_rest_fails() {
        assert_eq!(verdict(Ok("true")), Verdict::Passes);
        assert_eq!(verdict(Ok("false")), Verdict::FilteredOut);
        assert_eq!(verdict(Ok("null")), Verdict::FilteredOut);
        assert_eq!(
            verdict(Ok("1")),
            Verdict::Failed("the filter failed: it produced 1, not true, false or null".into())
        );
        let long = format!("\"{}\"", "x".repeat(500));
        let Verdict::Failed(why) = verdict(Ok(&long)) else {
            panic!("a string is not a verdict")
        };
        assert!(why.chars().count() < 200 && why.contains('…'), "{why}");
        assert_eq!(
            verdict(Err(&TransformError::Timeout { limit_ms: 1000 })),
            Verdict::Failed("the filter failed: the jq program ran longer than 1 s".into())
        );
        assert_eq!(
            verdict(Err(&TransformError::NoOutput)),
            Verdict::Failed("the filter failed: the program produced no output".into())
        );
    }

    #[tokio::test]
    async fn each_filtered_destination_gets_its_verdict_and_the_others_cost_nothing() {
        let passes = destination(Some(r#".total > 100 and .currency == "EUR""#));
        let rejects = destination(Some(".total > 1000"));
        let fails = destination(Some(r#".total + "x""#));
        let plain = destination(None);
        let e = event(json!({"total": 150, "currency": "EUR"}));
        let all = [passes, rejects.clone(), fails.clone(), plain.clone()];
        let v = verdicts_of(&all, &InProcess, &e).await.unwrap();
        assert_eq!(v.filtered_out, vec![rejects.id]);
        assert_eq!(v.failed.len(), 1);
        assert_eq!(v.failed[0].0, fails.id);
        assert!(
            v.failed[0]
                .1
                .starts_with("the filter failed: the jq program failed: "),
            "{}",
            v.failed[0].1
        );
        assert_eq!(
            verdicts_of(&[plain], &InProcess, &e).await.unwrap(),
            FilterVerdicts::default()
        );
    }

    #[tokio::test]
    async fn trying_shows_the_verdict_and_the_output_and_refuses_bad_samples() {
        let t = try_it(&InProcess, ".n > 1", "{m: .n}", r#"{"n": 2}"#)
            .await
            .unwrap();
        assert_eq!(t.filter, Some(Verdict::Passes));
        assert_eq!(t.transformed, Some(Ok(r#"{"m":2}"#.into())));

        let t = try_it(&InProcess, "  ", "{m: ", r#"{"n": 2}"#)
            .await
            .unwrap();
        assert_eq!(t.filter, None);
        let Some(Err(why)) = t.transformed else {
            panic!("{t:?}")
        };
        assert!(why.contains("does not compile"), "{why}");

        let code = |r: Result<Tried, OpsError>| match r {
            Err(OpsError::Invalid { code, .. }) => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(try_it(&InProcess, ".", "", "{nope").await),
            "invalid_sample"
        );
        let big = format!("\"{}\"", "x".repeat(MAX_SAMPLE_BYTES));
        assert_eq!(
            code(try_it(&InProcess, ".", "", &big).await),
            "sample_too_large"
        );
    }
}
