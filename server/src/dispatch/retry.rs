//! The retry policy of a destination (docs §2.3): its settings and presets, how
//! they are read from the API, the backoff schedule, which failures are retried,
//! and the decision after a failed attempt (retry when, or dead-letter).
//!
//! Pure rules: randomness comes in as `rand01`, the Retry-After value as a number
//! already parsed by [`super::retry_after`].

use serde_json::{Map, Value};

use crate::domain::ErrorClass;

/// One second, in milliseconds.
const SECOND_MS: u64 = 1_000;
/// One hour: the cap of a Retry-After value and the default `maxMs`.
const HOUR_MS: u64 = 3_600_000;
/// The largest `maxMs` a policy may set.
const MAX_DELAY_MS: u64 = 24 * HOUR_MS;
/// The range of `maxAttempts` under every preset.
const MIN_ATTEMPTS: i64 = 1;
const MAX_ATTEMPTS: i64 = 20;

/// The two schedules the product knows; a destination picks one and may override any field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// PartyFlow's own: fast retries with jitter; 4xx other than 408/429 dead-letter at once.
    Partyflow,
    /// The "Retries and rate limits" page: slower, no jitter, retries every failure it can.
    Standard,
}

impl Preset {
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Partyflow => "partyflow",
            Preset::Standard => "standard",
        }
    }
}

/// How a receiver's Retry-After (on 429 and 503) combines with our backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryAfterMode {
    /// The value replaces the backoff when it is within [1 s, 1 h]; otherwise it is ignored.
    Replace,
    /// The value is used when it is longer than the backoff, capped at 1 h.
    Extend,
}

impl RetryAfterMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryAfterMode::Replace => "replace",
            RetryAfterMode::Extend => "extend",
        }
    }
}

/// A checked retry policy. Build it with [`RetryPolicy::preset`] or [`RetryPolicy::parse`];
/// a hand-built value with `initial_ms > max_ms` still gives delays within `max_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub preset: Preset,
    /// The delay after the first failure.
    pub initial_ms: u64,
    /// The longest backoff delay.
    pub max_ms: u64,
    /// Attempts in all, the first try included; the last failure dead-letters.
    pub max_attempts: u32,
    /// The fraction (0..=1) by which a delay may randomly shrink or grow.
    pub jitter: f64,
    pub retry_after: RetryAfterMode,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::preset(Preset::Partyflow)
    }
}

/// Why a retry policy from the API was refused; the message is shown to the API user.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("retryPolicy must be a JSON object")]
    NotAnObject,
    #[error("retryPolicy has an unknown field {0:?}; allowed: preset, initialMs, maxMs, jitter, retryAfter")]
    UnknownField(String),
    #[error("retryPolicy.preset is required (\"partyflow\" or \"standard\")")]
    MissingPreset,
    #[error("retryPolicy.preset must be \"partyflow\" or \"standard\", got {0}")]
    InvalidPreset(String),
    #[error("retryPolicy.retryAfter must be \"replace\" or \"extend\", got {0}")]
    InvalidRetryAfter(String),
    #[error("retryPolicy.{field} must be a whole number of milliseconds, got {value}")]
    NotMilliseconds { field: &'static str, value: String },
    #[error("retryPolicy.initialMs must be at least 1, got {0}")]
    InitialTooSmall(u64),
    #[error("retryPolicy.maxMs must be at most 86400000 (24 h), got {0}")]
    MaxTooLarge(u64),
    #[error("retryPolicy.initialMs ({initial_ms}) must not be greater than maxMs ({max_ms})")]
    InitialAboveMax { initial_ms: u64, max_ms: u64 },
    #[error("retryPolicy.jitter must be a number between 0 and 1, got {0}")]
    InvalidJitter(String),
    #[error("maxAttempts must be between 1 and 20, got {0}")]
    MaxAttemptsOutOfRange(i64),
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Try again after this many milliseconds.
    Retry { delay_ms: u64 },
    /// Give up: the delivery is `failed`.
    DeadLetter,
}

impl RetryPolicy {
    /// The preset's settings, unchanged.
    pub fn preset(preset: Preset) -> RetryPolicy {
        match preset {
            Preset::Partyflow => RetryPolicy {
                preset,
                initial_ms: 5 * SECOND_MS,
                max_ms: HOUR_MS,
                max_attempts: 8,
                jitter: 0.2,
                retry_after: RetryAfterMode::Replace,
            },
            Preset::Standard => RetryPolicy {
                preset,
                initial_ms: 30 * SECOND_MS,
                max_ms: HOUR_MS,
                max_attempts: 6,
                jitter: 0.0,
                retry_after: RetryAfterMode::Extend,
            },
        }
    }

    /// Reads a destination's `retryPolicy` and `maxAttempts` as the API gives them.
    ///
    /// `None` or JSON `null` means the partyflow preset; fields left out come from the
    /// chosen preset, and `max_attempts` (when given) overrides the preset's. Unknown
    /// fields and out-of-range values are refused with a message naming the field.
    pub fn parse(
        policy: Option<&Value>,
        max_attempts: Option<i64>,
    ) -> Result<RetryPolicy, PolicyError> {
        let mut parsed = match policy {
            None | Some(Value::Null) => RetryPolicy::preset(Preset::Partyflow),
            Some(Value::Object(fields)) => Self::parse_object(fields)?,
            Some(_) => return Err(PolicyError::NotAnObject),
        };
        if let Some(n) = max_attempts {
            if !(MIN_ATTEMPTS..=MAX_ATTEMPTS).contains(&n) {
                return Err(PolicyError::MaxAttemptsOutOfRange(n));
            }
            parsed.max_attempts = n as u32;
        }
        Ok(parsed)
    }

    fn parse_object(fields: &Map<String, Value>) -> Result<RetryPolicy, PolicyError> {
        const KNOWN: [&str; 5] = ["preset", "initialMs", "maxMs", "jitter", "retryAfter"];
        if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(PolicyError::UnknownField(unknown.clone()));
        }

        let preset = match fields.get("preset") {
            None | Some(Value::Null) => return Err(PolicyError::MissingPreset),
            Some(v) => serde_json::from_value::<Preset>(v.clone())
                .map_err(|_| PolicyError::InvalidPreset(v.to_string()))?,
        };
        let mut policy = RetryPolicy::preset(preset);

        if let Some(v) = present(fields, "initialMs") {
            policy.initial_ms = milliseconds("initialMs", v)?;
        }
        if let Some(v) = present(fields, "maxMs") {
            policy.max_ms = milliseconds("maxMs", v)?;
        }
        if let Some(v) = present(fields, "jitter") {
            policy.jitter = match v.as_f64() {
                Some(j) if (0.0..=1.0).contains(&j) => j,
                _ => return Err(PolicyError::InvalidJitter(v.to_string())),
            };
        }
        if let Some(v) = present(fields, "retryAfter") {
            policy.retry_after = serde_json::from_value::<RetryAfterMode>(v.clone())
                .map_err(|_| PolicyError::InvalidRetryAfter(v.to_string()))?;
        }

        if policy.initial_ms < 1 {
            return Err(PolicyError::InitialTooSmall(policy.initial_ms));
        }
        if policy.max_ms > MAX_DELAY_MS {
            return Err(PolicyError::MaxTooLarge(policy.max_ms));
        }
        if policy.initial_ms > policy.max_ms {
            return Err(PolicyError::InitialAboveMax {
                initial_ms: policy.initial_ms,
                max_ms: policy.max_ms,
            });
        }
        Ok(policy)
    }

    /// The full API shape, every field filled in; `maxAttempts` lives on the destination.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "preset": self.preset.as_str(),
            "initialMs": self.initial_ms,
            "maxMs": self.max_ms,
            "jitter": self.jitter,
            "retryAfter": self.retry_after.as_str(),
        })
    }

    /// The backoff before jitter after `failed_attempts` failures:
    /// `min(initial · 2^(n-1), max)`. `n = 0` is treated as 1; large `n` saturates at `max`.
    pub fn base_delay_ms(&self, failed_attempts: u32) -> u64 {
        let doublings = failed_attempts.max(1) - 1;
        let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
        self.initial_ms.saturating_mul(factor).min(self.max_ms)
    }

    /// The backoff with jitter: `base · (1 + jitter · (2 · rand01 − 1))`, rounded.
    /// `rand01` is a uniform random number in [0, 1]; values outside are clamped.
    pub fn jittered_delay_ms(&self, failed_attempts: u32, rand01: f64) -> u64 {
        let base = self.base_delay_ms(failed_attempts) as f64;
        let r = if rand01.is_nan() {
            0.5
        } else {
            rand01.clamp(0.0, 1.0)
        };
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        let delay = base * (1.0 + jitter * (2.0 * r - 1.0));
        // `as` saturates: negative values become 0, huge ones u64::MAX.
        delay.round() as u64
    }

    /// Whether a failure of this class (with this HTTP status, for `Http`) is worth another attempt.
    ///
    /// `Cancelled` and `RateLimited` are not failures and answer `false`; the caller must
    /// not dead-letter on them. `Lost` answers `true` (docs D3).
    pub fn is_retryable(&self, class: ErrorClass, status: Option<u16>) -> bool {
        match class {
            ErrorClass::Cancelled | ErrorClass::RateLimited => false,
            ErrorClass::Blocked | ErrorClass::Request | ErrorClass::Transformation => false,
            ErrorClass::Timeout
            | ErrorClass::Dns
            | ErrorClass::Tls
            | ErrorClass::Connect
            | ErrorClass::Lost => true,
            ErrorClass::Redirect => self.preset == Preset::Standard,
            ErrorClass::Http => match self.preset {
                Preset::Standard => true,
                Preset::Partyflow => matches!(status, Some(408 | 429 | 500..=599)),
            },
        }
    }

    /// What to do after attempt number `attempts_made` (counting the one that just failed).
    ///
    /// Dead-letters when the failure is not retryable or the attempts are used up;
    /// otherwise waits the jittered backoff, combined with `retry_after_ms` only when
    /// `status` is 429 or 503 (see [`RetryAfterMode`]). `Lost` attempts (docs D3: retried
    /// at once without using up an attempt) are the caller's to handle before asking.
    pub fn decide(
        &self,
        attempts_made: u32,
        class: ErrorClass,
        status: Option<u16>,
        retry_after_ms: Option<u64>,
        rand01: f64,
    ) -> Decision {
        if !self.is_retryable(class, status) || attempts_made >= self.max_attempts {
            return Decision::DeadLetter;
        }
        let backoff = self.jittered_delay_ms(attempts_made, rand01);
        let retry_after = retry_after_ms.filter(|_| matches!(status, Some(429 | 503)));
        let delay_ms = match (retry_after, self.retry_after) {
            (None, _) => backoff,
            (Some(ra), RetryAfterMode::Replace) if (SECOND_MS..=HOUR_MS).contains(&ra) => ra,
            (Some(_), RetryAfterMode::Replace) => backoff,
            (Some(ra), RetryAfterMode::Extend) => backoff.max(ra.min(HOUR_MS)),
        };
        Decision::Retry { delay_ms }
    }
}

/// A field that is present and not `null` (`null` means "take the preset's").
fn present<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    fields.get(name).filter(|v| !v.is_null())
}

fn milliseconds(field: &'static str, v: &Value) -> Result<u64, PolicyError> {
    v.as_u64().ok_or_else(|| PolicyError::NotMilliseconds {
        field,
        value: v.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn partyflow() -> RetryPolicy {
        RetryPolicy::preset(Preset::Partyflow)
    }

    fn standard() -> RetryPolicy {
        RetryPolicy::preset(Preset::Standard)
    }

    fn retry_delay(d: Decision) -> u64 {
        match d {
            Decision::Retry { delay_ms } => delay_ms,
            Decision::DeadLetter => panic!("expected a retry, got a dead letter"),
        }
    }

    #[test]
    fn the_partyflow_schedule_is_5_10_20_40_80_160_320_seconds_then_dead_letters_after_about_ten_and_a_half_minutes(
    ) {
        let p = partyflow();
        let schedule: Vec<u64> = (1..=7).map(|n| p.base_delay_ms(n) / 1000).collect();
        assert_eq!(schedule, [5, 10, 20, 40, 80, 160, 320]);
        assert_eq!(schedule.iter().sum::<u64>(), 635, "10 min 35 s");

        for n in 1..=7 {
            let d = p.decide(n, ErrorClass::Http, Some(500), None, 0.5);
            assert_eq!(
                d,
                Decision::Retry {
                    delay_ms: p.base_delay_ms(n)
                }
            );
        }
        assert_eq!(
            p.decide(8, ErrorClass::Http, Some(500), None, 0.5),
            Decision::DeadLetter
        );
    }

    #[test]
    fn the_standard_schedule_doubles_from_30_seconds_and_is_capped_at_an_hour() {
        let p = RetryPolicy::parse(Some(&json!({"preset": "standard"})), Some(20)).unwrap();
        let minutes: Vec<f64> = (1..=10)
            .map(|n| p.base_delay_ms(n) as f64 / 60_000.0)
            .collect();
        assert_eq!(
            minutes,
            [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
        );
        for n in 1..20 {
            assert!(matches!(
                p.decide(n, ErrorClass::Timeout, None, None, 0.0),
                Decision::Retry { .. }
            ));
        }
        assert_eq!(
            p.decide(20, ErrorClass::Timeout, None, None, 0.0),
            Decision::DeadLetter
        );
    }

    #[test]
    fn the_standard_preset_dead_letters_after_its_sixth_attempt() {
        let p = standard();
        assert!(matches!(
            p.decide(5, ErrorClass::Connect, None, None, 0.0),
            Decision::Retry { .. }
        ));
        assert_eq!(
            p.decide(6, ErrorClass::Connect, None, None, 0.0),
            Decision::DeadLetter
        );
    }

    #[test]
    fn a_huge_failure_count_saturates_at_the_maximum_without_overflow() {
        let p = partyflow();
        for n in [40, 63, 64, 65, 1000, u32::MAX] {
            assert_eq!(p.base_delay_ms(n), HOUR_MS);
        }
        let wide = RetryPolicy {
            initial_ms: u64::MAX / 2,
            max_ms: u64::MAX,
            ..partyflow()
        };
        assert_eq!(wide.base_delay_ms(3), u64::MAX);
    }

    #[test]
    fn zero_failures_are_treated_as_the_first() {
        assert_eq!(partyflow().base_delay_ms(0), 5_000);
    }

    #[test]
    fn jitter_stays_within_twenty_percent_either_way() {
        let p = partyflow();
        for n in 1..=7 {
            let base = p.base_delay_ms(n) as f64;
            for i in 0..=100 {
                let d = p.jittered_delay_ms(n, i as f64 / 100.0) as f64;
                assert!(
                    d >= base * 0.8 - 0.5 && d <= base * 1.2 + 0.5,
                    "{d} vs {base}"
                );
            }
            assert_eq!(p.jittered_delay_ms(n, 0.0) as f64, (base * 0.8).round());
            assert_eq!(p.jittered_delay_ms(n, 1.0) as f64, (base * 1.2).round());
            assert_eq!(p.jittered_delay_ms(n, 0.5) as f64, base);
        }
    }

    #[test]
    fn a_random_number_outside_zero_to_one_is_clamped() {
        let p = partyflow();
        assert_eq!(p.jittered_delay_ms(1, -5.0), 4_000);
        assert_eq!(p.jittered_delay_ms(1, 7.0), 6_000);
        assert_eq!(p.jittered_delay_ms(1, f64::NAN), 5_000);
    }

    #[test]
    fn full_jitter_can_reach_zero_but_never_goes_below() {
        let p = RetryPolicy {
            jitter: 1.0,
            ..partyflow()
        };
        assert_eq!(p.jittered_delay_ms(1, 0.0), 0);
        assert_eq!(p.jittered_delay_ms(1, 1.0), 10_000);
    }

    #[test]
    fn the_standard_preset_has_no_jitter() {
        let p = standard();
        assert_eq!(p.jittered_delay_ms(2, 0.0), 60_000);
        assert_eq!(p.jittered_delay_ms(2, 1.0), 60_000);
    }

    #[test]
    fn a_404_dead_letters_at_once_under_partyflow_but_is_retried_under_standard() {
        assert_eq!(
            partyflow().decide(1, ErrorClass::Http, Some(404), None, 0.5),
            Decision::DeadLetter
        );
        assert_eq!(
            standard().decide(1, ErrorClass::Http, Some(404), None, 0.5),
            Decision::Retry { delay_ms: 30_000 }
        );
    }

    #[test]
    fn partyflow_retries_408_429_and_every_5xx_and_no_other_4xx() {
        let p = partyflow();
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert!(p.is_retryable(ErrorClass::Http, Some(status)), "{status}");
        }
        for status in [400, 401, 403, 404, 409, 410, 413, 422, 451, 499] {
            assert!(!p.is_retryable(ErrorClass::Http, Some(status)), "{status}");
        }
        assert!(!p.is_retryable(ErrorClass::Http, None));
    }

    #[test]
    fn a_redirect_dead_letters_under_partyflow_but_is_retried_under_standard() {
        for status in [301, 302, 307, 308] {
            assert_eq!(
                partyflow().decide(1, ErrorClass::Redirect, Some(status), None, 0.5),
                Decision::DeadLetter
            );
            assert!(matches!(
                standard().decide(1, ErrorClass::Redirect, Some(status), None, 0.5),
                Decision::Retry { .. }
            ));
        }
    }

    #[test]
    fn transport_failures_and_lost_attempts_are_retried_under_both_presets() {
        for p in [partyflow(), standard()] {
            for class in [
                ErrorClass::Timeout,
                ErrorClass::Dns,
                ErrorClass::Tls,
                ErrorClass::Connect,
                ErrorClass::Lost,
            ] {
                assert!(p.is_retryable(class, None), "{class} under {:?}", p.preset);
            }
        }
    }

    #[test]
    fn blocked_request_and_transformation_failures_are_never_retried() {
        for p in [partyflow(), standard()] {
            for class in [
                ErrorClass::Blocked,
                ErrorClass::Request,
                ErrorClass::Transformation,
            ] {
                assert!(!p.is_retryable(class, None));
                assert_eq!(p.decide(1, class, None, None, 0.5), Decision::DeadLetter);
            }
        }
    }

    #[test]
    fn cancelled_and_rate_limited_are_not_failures_and_not_retryable() {
        for p in [partyflow(), standard()] {
            assert!(!p.is_retryable(ErrorClass::Cancelled, None));
            assert!(!p.is_retryable(ErrorClass::RateLimited, None));
        }
    }

    #[test]
    fn replace_mode_uses_a_retry_after_between_one_second_and_one_hour_instead_of_the_backoff() {
        let p = partyflow();
        let decide = |status, ra| retry_delay(p.decide(3, ErrorClass::Http, Some(status), ra, 0.5));
        assert_eq!(decide(429, Some(2_000)), 2_000, "shorter than the backoff");
        assert_eq!(
            decide(503, Some(600_000)),
            600_000,
            "longer than the backoff"
        );
        assert_eq!(decide(429, Some(1_000)), 1_000, "1 s is inside");
        assert_eq!(decide(429, Some(HOUR_MS)), HOUR_MS, "1 h is inside");
    }

    #[test]
    fn replace_mode_ignores_a_retry_after_outside_one_second_to_one_hour() {
        let p = partyflow();
        let decide = |ra| retry_delay(p.decide(3, ErrorClass::Http, Some(429), ra, 0.5));
        assert_eq!(decide(Some(0)), 20_000);
        assert_eq!(decide(Some(999)), 20_000);
        assert_eq!(decide(Some(HOUR_MS + 1)), 20_000);
        assert_eq!(decide(None), 20_000);
    }

    #[test]
    fn extend_mode_uses_a_retry_after_only_when_it_is_longer_and_caps_it_at_an_hour() {
        let p = standard();
        let decide = |ra| retry_delay(p.decide(2, ErrorClass::Http, Some(503), ra, 0.0));
        assert_eq!(decide(Some(10_000)), 60_000, "shorter: the backoff wins");
        assert_eq!(decide(Some(90_000)), 90_000, "longer: the Retry-After wins");
        assert_eq!(decide(Some(5 * HOUR_MS)), HOUR_MS, "capped at 1 h");
        assert_eq!(decide(Some(0)), 60_000);
    }

    #[test]
    fn extend_mode_compares_with_the_jittered_backoff() {
        let p = RetryPolicy {
            retry_after: RetryAfterMode::Extend,
            ..partyflow()
        };
        // Base 5 s, jittered to 6 s at rand01 = 1.
        let d = p.decide(1, ErrorClass::Http, Some(429), Some(5_500), 1.0);
        assert_eq!(d, Decision::Retry { delay_ms: 6_000 });
        let d = p.decide(1, ErrorClass::Http, Some(429), Some(6_500), 1.0);
        assert_eq!(d, Decision::Retry { delay_ms: 6_500 });
    }

    #[test]
    fn retry_after_is_ignored_on_statuses_other_than_429_and_503() {
        for p in [partyflow(), standard()] {
            for (class, status) in [
                (ErrorClass::Http, Some(500)),
                (ErrorClass::Http, Some(502)),
                (ErrorClass::Timeout, None),
            ] {
                let d = p.decide(1, class, status, Some(120_000), 0.5);
                assert_eq!(
                    d,
                    Decision::Retry {
                        delay_ms: p.initial_ms
                    }
                );
            }
        }
    }

    #[test]
    fn retry_after_does_not_rescue_a_delivery_that_used_up_its_attempts() {
        let d = partyflow().decide(8, ErrorClass::Http, Some(429), Some(2_000), 0.5);
        assert_eq!(d, Decision::DeadLetter);
    }

    #[test]
    fn no_policy_means_the_partyflow_preset() {
        assert_eq!(RetryPolicy::parse(None, None).unwrap(), partyflow());
        assert_eq!(
            RetryPolicy::parse(Some(&Value::Null), None).unwrap(),
            partyflow()
        );
        assert_eq!(RetryPolicy::default(), partyflow());
    }

    #[test]
    fn the_presets_have_the_documented_settings() {
        let p = partyflow();
        assert_eq!(
            (
                p.initial_ms,
                p.max_ms,
                p.max_attempts,
                p.jitter,
                p.retry_after
            ),
            (5_000, 3_600_000, 8, 0.2, RetryAfterMode::Replace)
        );
        let s = standard();
        assert_eq!(
            (
                s.initial_ms,
                s.max_ms,
                s.max_attempts,
                s.jitter,
                s.retry_after
            ),
            (30_000, 3_600_000, 6, 0.0, RetryAfterMode::Extend)
        );
    }

    #[test]
    fn fields_left_out_come_from_the_chosen_preset() {
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "standard", "initialMs": 1000, "jitter": 0.5})),
            None,
        )
        .unwrap();
        assert_eq!(
            p,
            RetryPolicy {
                initial_ms: 1000,
                jitter: 0.5,
                ..standard()
            }
        );
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "partyflow", "maxMs": 60000, "retryAfter": "extend"})),
            Some(3),
        )
        .unwrap();
        assert_eq!(
            p,
            RetryPolicy {
                max_ms: 60_000,
                retry_after: RetryAfterMode::Extend,
                max_attempts: 3,
                ..partyflow()
            }
        );
    }

    #[test]
    fn null_fields_mean_the_preset_value() {
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "standard", "jitter": null, "maxMs": null})),
            None,
        )
        .unwrap();
        assert_eq!(p, standard());
    }

    #[test]
    fn max_attempts_from_1_to_20_overrides_the_preset_and_anything_else_is_refused() {
        for n in [1, 6, 8, 20] {
            assert_eq!(
                RetryPolicy::parse(None, Some(n)).unwrap().max_attempts,
                n as u32
            );
        }
        for n in [0, -1, 21, i64::MAX] {
            let err = RetryPolicy::parse(None, Some(n)).unwrap_err();
            assert_eq!(err, PolicyError::MaxAttemptsOutOfRange(n));
            assert!(err.to_string().contains("between 1 and 20"));
        }
    }

    #[test]
    fn a_policy_round_trips_through_its_json_shape() {
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "standard", "initialMs": 2500, "maxMs": 90000, "jitter": 0.1, "retryAfter": "replace"})),
            Some(12),
        )
        .unwrap();
        let json = p.to_json();
        assert_eq!(
            json,
            json!({"preset": "standard", "initialMs": 2500, "maxMs": 90000, "jitter": 0.1, "retryAfter": "replace"})
        );
        assert_eq!(RetryPolicy::parse(Some(&json), Some(12)).unwrap(), p);
        assert_eq!(
            partyflow().to_json(),
            json!({"preset": "partyflow", "initialMs": 5000, "maxMs": 3600000, "jitter": 0.2, "retryAfter": "replace"})
        );
    }

    #[test]
    fn parse_errors_say_exactly_what_is_wrong() {
        #[rustfmt::skip]
        let cases = [
            (json!("partyflow"), "must be a JSON object"),
            (json!({"preset": "standard", "maxAttempts": 3}), "unknown field \"maxAttempts\""),
            (json!({"preset": "standard", "initial_ms": 3}), "unknown field \"initial_ms\""),
            (json!({"initialMs": 1000}), "preset is required"),
            (json!({"preset": "fast"}), "preset must be \"partyflow\" or \"standard\", got \"fast\""),
            (json!({"preset": 1}), "preset must be"),
            (json!({"preset": "standard", "jitter": 1.5}), "jitter must be a number between 0 and 1, got 1.5"),
            (json!({"preset": "standard", "jitter": -0.1}), "jitter must be a number between 0 and 1"),
            (json!({"preset": "standard", "jitter": "0.1"}), "jitter must be a number"),
            (json!({"preset": "standard", "initialMs": 0}), "initialMs must be at least 1, got 0"),
            (json!({"preset": "standard", "initialMs": -5}), "initialMs must be a whole number of milliseconds, got -5"),
            (json!({"preset": "standard", "initialMs": 1.5}), "initialMs must be a whole number"),
            (json!({"preset": "standard", "maxMs": "1h"}), "maxMs must be a whole number"),
            (json!({"preset": "standard", "maxMs": 86_400_001}), "maxMs must be at most 86400000 (24 h), got 86400001"),
            (json!({"preset": "partyflow", "initialMs": 10_000, "maxMs": 5_000}), "initialMs (10000) must not be greater than maxMs (5000)"),
            (json!({"preset": "standard", "maxMs": 10_000}), "initialMs (30000) must not be greater than maxMs (10000)"),
            (json!({"preset": "standard", "retryAfter": "ignore"}), "retryAfter must be \"replace\" or \"extend\", got \"ignore\""),
        ];
        for (input, expected) in cases {
            let err = RetryPolicy::parse(Some(&input), None)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(expected),
                "{input}: {err:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn the_boundaries_of_each_field_are_accepted() {
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "partyflow", "initialMs": 1, "maxMs": 86_400_000, "jitter": 0})),
            Some(1),
        )
        .unwrap();
        assert_eq!(
            (p.initial_ms, p.max_ms, p.jitter, p.max_attempts),
            (1, 86_400_000, 0.0, 1)
        );
        let p =
            RetryPolicy::parse(Some(&json!({"preset": "partyflow", "jitter": 1})), None).unwrap();
        assert_eq!(p.jitter, 1.0);
        let p = RetryPolicy::parse(
            Some(&json!({"preset": "standard", "initialMs": 7, "maxMs": 7})),
            None,
        )
        .unwrap();
        assert_eq!(p.base_delay_ms(5), 7);
    }

    #[test]
    fn presets_and_modes_use_their_lowercase_wire_names() {
        assert_eq!(
            serde_json::to_value(Preset::Partyflow).unwrap(),
            json!("partyflow")
        );
        assert_eq!(
            serde_json::to_value(Preset::Standard).unwrap(),
            json!("standard")
        );
        assert_eq!(
            serde_json::to_value(RetryAfterMode::Replace).unwrap(),
            json!("replace")
        );
        assert_eq!(
            serde_json::to_value(RetryAfterMode::Extend).unwrap(),
            json!("extend")
        );
        assert_eq!(
            serde_json::from_value::<Preset>(json!("standard")).unwrap(),
            Preset::Standard
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Any policy the API accepts: built through [`RetryPolicy::parse`] from
    /// fields within its bounds, with every other field left to the preset.
    fn api_policy() -> impl Strategy<Value = RetryPolicy> {
        (
            prop_oneof![Just("partyflow"), Just("standard")],
            1..=MAX_DELAY_MS,
            0.0..=1.0f64,
            prop_oneof![Just("replace"), Just("extend")],
            MIN_ATTEMPTS..=MAX_ATTEMPTS,
            any::<u64>(),
        )
            .prop_map(|(preset, initial_ms, jitter, mode, attempts, spread)| {
                let max_ms = initial_ms + spread % (MAX_DELAY_MS - initial_ms + 1);
                let fields = json!({
                    "preset": preset,
                    "initialMs": initial_ms,
                    "maxMs": max_ms,
                    "jitter": jitter,
                    "retryAfter": mode,
                });
                RetryPolicy::parse(Some(&fields), Some(attempts))
                    .expect("the strategy stays within the API bounds")
            })
    }

    fn any_class() -> impl Strategy<Value = ErrorClass> {
        proptest::sample::select(ErrorClass::ALL.to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_base_delay_never_shrinks_as_failures_grow_and_never_passes_the_maximum(p in api_policy()) {
            let mut previous = 0;
            for n in 1..=64 {
                let base = p.base_delay_ms(n);
                prop_assert!(base >= previous, "n={n}: {base} < {previous}");
                prop_assert!(base <= p.max_ms, "n={n}: {base} > {}", p.max_ms);
                prop_assert!(base >= p.initial_ms.min(p.max_ms));
                previous = base;
            }
            prop_assert_eq!(p.base_delay_ms(1), p.initial_ms);
        }

        #[test]
        fn the_jittered_delay_stays_within_the_jitter_of_the_base(
            p in api_policy(),
            n in 1u32..=64,
            rand01 in 0.0..1.0f64,
        ) {
            let base = p.base_delay_ms(n) as f64;
            let delay = p.jittered_delay_ms(n, rand01) as f64;
            let (lo, hi) = ((base * (1.0 - p.jitter)).floor(), (base * (1.0 + p.jitter)).ceil());
            prop_assert!(lo <= delay && delay <= hi, "{delay} outside [{lo}, {hi}] (base {base}, jitter {})", p.jitter);
        }

        #[test]
        fn decide_never_panics_and_never_retries_past_max_attempts(
            p in api_policy(),
            attempts_made in prop_oneof![1u32..=25, any::<u32>()],
            class in any_class(),
            status in proptest::option::of(any::<u16>()),
            retry_after_ms in proptest::option::of(prop_oneof![0u64..=10_000_000, any::<u64>()]),
            rand01 in prop_oneof![0.0..1.0f64, any::<f64>()],
        ) {
            let decision = p.decide(attempts_made, class, status, retry_after_ms, rand01);
            if attempts_made >= p.max_attempts || !p.is_retryable(class, status) {
                prop_assert_eq!(decision, Decision::DeadLetter);
            }
            if let Decision::Retry { delay_ms } = decision {
                // Never longer than the longest backoff or an hour of Retry-After.
                let longest_backoff = (p.max_ms as f64 * (1.0 + p.jitter)).ceil() as u64;
                prop_assert!(delay_ms <= longest_backoff.max(HOUR_MS), "{delay_ms} ms");
            }
        }
    }
}
