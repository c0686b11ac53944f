//! Reading how long a receiver asks us to wait (docs §2.4), from a 429 or 503
//! answer: the `Retry-After` header (delta-seconds, then HTTP-date), then the body
//! (`{"retry_after": n}`, then a bare number).
//!
//! Receivers send all sorts of things; anything that does not parse is ignored and
//! the next format is tried. The clock is an argument.

use std::time::{Duration, SystemTime};

/// Waits longer than this are not meant seriously (or are attacks on our arithmetic): ignored.
const ABSURD: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How long the receiver asked us to wait, or `None` when the status is not 429/503
/// or nothing usable was sent.
///
/// A date in the past gives `Duration::ZERO`; values over ten years are ignored.
/// Never panics, whatever the header or body hold. Whether and how the value is used
/// is the retry policy's business ([`super::retry::RetryAfterMode`]).
pub fn parse_retry_after(
    status: u16,
    header: Option<&str>,
    body: &[u8],
    now: SystemTime,
) -> Option<Duration> {
    if status != 429 && status != 503 {
        return None;
    }
    header
        .and_then(delta_seconds)
        .or_else(|| header.and_then(|h| http_date(h, now)))
        .or_else(|| json_retry_after(body))
        .or_else(|| bare_number(body))
        .filter(|d| *d <= ABSURD)
}

/// `Retry-After: 120`
fn delta_seconds(header: &str) -> Option<Duration> {
    let h = header.trim();
    if h.is_empty() || !h.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    h.parse::<u64>()
        .ok()
        .map(Duration::from_secs)
        .filter(|d| *d <= ABSURD)
}

/// `Retry-After: Wed, 21 Oct 2015 07:28:00 GMT` (also the obsolete RFC 850 and asctime forms).
fn http_date(header: &str, now: SystemTime) -> Option<Duration> {
    let header = header.trim();
    let at = httpdate::parse_http_date(header)
        .ok()
        .or_else(|| ignoring_weekday(header))?;
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(wait).filter(|d| *d <= ABSURD)
}

/// An IMF-fixdate whose weekday does not match its date (`Wed, 18 Apr 2026 …` is a
/// Saturday): `httpdate` refuses it, but the date itself is unambiguous, so we take it.
fn ignoring_weekday(header: &str) -> Option<SystemTime> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let (day, rest) = (header.get(..3)?, header.get(3..)?);
    if !DAYS.contains(&day) || !rest.starts_with(", ") {
        return None;
    }
    DAYS.iter()
        .find_map(|day| httpdate::parse_http_date(&format!("{day}{rest}")).ok())
}

/// `{"retry_after": 30}` or `{"retry_after": 2.5}`
fn json_retry_after(body: &[u8]) -> Option<Duration> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let n = value.as_object()?.get("retry_after")?;
    if let Some(secs) = n.as_u64() {
        return Some(Duration::from_secs(secs)).filter(|d| *d <= ABSURD);
    }
    seconds_f64(n.as_f64()?)
}

/// A body that is just `30` (or `2.5`), whitespace around it allowed.
fn bare_number(body: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs)).filter(|d| *d <= ABSURD);
    }
    seconds_f64(text.parse::<f64>().ok()?)
}

/// Fractional seconds, refusing what `Duration::from_secs_f64` would panic on.
fn seconds_f64(secs: f64) -> Option<Duration> {
    if !secs.is_finite() || secs < 0.0 || secs > ABSURD.as_secs_f64() {
        return None;
    }
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wed, 18 Apr 2026 14:35:00 GMT is 1776522900; "now" is 100 s before it.
    const THEN: u64 = 1_776_522_900;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(THEN - 100)
    }

    fn parse(status: u16, header: Option<&str>, body: &str) -> Option<Duration> {
        parse_retry_after(status, header, body.as_bytes(), now())
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn a_delta_seconds_header_is_read_with_whitespace_trimmed() {
        assert_eq!(parse(429, Some("30"), ""), secs(30));
        assert_eq!(parse(503, Some("  120 "), ""), secs(120));
        assert_eq!(parse(429, Some("0"), ""), secs(0));
    }

    #[test]
    fn an_http_date_header_gives_the_time_until_that_date() {
        let header = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(THEN));
        assert_eq!(header, "Sat, 18 Apr 2026 14:35:00 GMT");
        assert_eq!(parse(429, Some(&header), ""), secs(100));
        assert_eq!(
            parse(503, Some(" Sat, 18 Apr 2026 14:35:00 GMT "), ""),
            secs(100)
        );
    }

    #[test]
    fn an_http_date_with_the_wrong_weekday_is_still_read() {
        // The example in docs §2.4: 18 Apr 2026 is a Saturday.
        assert_eq!(
            parse(429, Some("Wed, 18 Apr 2026 14:35:00 GMT"), ""),
            secs(100)
        );
        assert_eq!(
            parse(429, Some("Xyz, 18 Apr 2026 14:35:00 GMT"), "3"),
            secs(3)
        );
        assert_eq!(
            parse(429, Some("Wed, 31 Feb 2026 14:35:00 GMT"), "3"),
            secs(3)
        );
    }

    #[test]
    fn the_obsolete_http_date_forms_are_read_too() {
        assert_eq!(
            parse(429, Some("Saturday, 18-Apr-26 14:35:00 GMT"), ""),
            secs(100)
        );
        assert_eq!(parse(429, Some("Sat Apr 18 14:35:00 2026"), ""), secs(100));
    }

    #[test]
    fn an_http_date_in_the_past_means_no_wait() {
        assert_eq!(
            parse(429, Some("Sun, 06 Nov 1994 08:49:37 GMT"), ""),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_json_body_with_retry_after_is_read_as_seconds() {
        assert_eq!(parse(429, None, r#"{"retry_after": 30}"#), secs(30));
        assert_eq!(
            parse(429, None, r#"{"error": "slow down", "retry_after": 2.5}"#),
            Some(Duration::from_millis(2_500))
        );
    }

    #[test]
    fn a_body_that_is_just_a_number_is_read_as_seconds() {
        assert_eq!(parse(429, None, "45"), secs(45));
        assert_eq!(parse(503, None, " 7\n"), secs(7));
        assert_eq!(parse(503, None, "1.5"), Some(Duration::from_millis(1_500)));
    }

    #[test]
    fn the_header_wins_over_the_body_and_delta_seconds_over_everything() {
        assert_eq!(parse(429, Some("10"), r#"{"retry_after": 30}"#), secs(10));
        assert_eq!(parse(429, Some("10"), "99"), secs(10));
        assert_eq!(
            parse(
                429,
                Some("Sat, 18 Apr 2026 14:35:00 GMT"),
                r#"{"retry_after": 30}"#
            ),
            secs(100)
        );
    }

    #[test]
    fn garbage_in_one_place_falls_through_to_the_next_format() {
        assert_eq!(parse(429, Some("soon"), r#"{"retry_after": 30}"#), secs(30));
        assert_eq!(parse(429, Some("-5"), "12"), secs(12));
        assert_eq!(
            parse(429, Some("1.5"), "12"),
            secs(12),
            "delta-seconds are whole"
        );
        assert_eq!(parse(429, Some(""), r#"{"retry_after": "30"}"#), None);
        assert_eq!(parse(429, Some("Someday, 99 Foo 2026"), "8"), secs(8));
    }

    #[test]
    fn garbage_everywhere_gives_nothing_and_never_panics() {
        let bodies = [
            "",
            "   ",
            "not json",
            "{",
            "[30]",
            r#"{"retry_after": -1}"#,
            r#"{"retry_after": null}"#,
            r#"{"retry_after": 1e300}"#,
            r#"{"retry_after": {"s": 3}}"#,
            r#"{"retryAfter": 30}"#,
            "-3",
            "NaN",
            "inf",
            "1e5",
            "1.2.3",
            "99999999999999999999999999999",
            "30 seconds",
        ];
        for body in bodies {
            assert_eq!(parse(429, Some("garbage"), body), None, "{body:?}");
        }
        assert_eq!(
            parse_retry_after(429, None, &[0xff, 0xfe, b'3'], now()),
            None
        );
        assert_eq!(parse(429, None, ""), None);
    }

    #[test]
    fn absurdly_long_waits_are_ignored() {
        assert_eq!(parse(429, Some("18446744073709551615"), ""), None);
        assert_eq!(parse(429, Some("999999999999"), "5"), secs(5));
        assert_eq!(parse(429, Some("Fri, 31 Dec 9999 23:59:59 GMT"), ""), None);
        assert_eq!(
            parse(429, None, r#"{"retry_after": 18446744073709551615}"#),
            None
        );
        assert_eq!(parse(429, None, "31536000000.5"), None);
        assert_eq!(parse(429, None, r#"{"retry_after": 86400}"#), secs(86_400));
    }

    #[test]
    fn only_429_and_503_answers_are_read() {
        for status in [200, 302, 400, 404, 408, 500, 502, 504] {
            assert_eq!(parse(status, Some("30"), "30"), None, "{status}");
        }
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// Header values that look like what receivers send, and some that do not.
    fn header() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(prop_oneof![
            any::<String>(),
            "[0-9]{0,25}",
            "[ \t]*-?[0-9]{1,12}(\\.[0-9]{0,4})?[ \t]*",
            "(Mon|Tue|Wed|Thu|Fri|Sat|Sun|Xyz), [0-9]{1,2} (Jan|Feb|Apr|Dec|Foo) [0-9]{1,5} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
            (0u64..=253_402_300_799).prop_map(|s| httpdate::fmt_http_date(
                SystemTime::UNIX_EPOCH + Duration::from_secs(s)
            )),
        ])
    }

    /// Bodies: arbitrary bytes, bare numbers, and `{"retry_after": …}` with any JSON number.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            "[ \n]*[0-9.eE+-]{0,30}[ \n]*".prop_map(String::into_bytes),
            any::<f64>().prop_map(|f| format!(r#"{{"retry_after": {f}}}"#).into_bytes()),
            any::<u64>().prop_map(|n| format!(r#"{{"retry_after": {n}}}"#).into_bytes()),
            any::<i64>().prop_map(|n| format!(r#"{{"retry_after": {n}}}"#).into_bytes()),
            "\\{\"retry_after\": .{0,20}\\}".prop_map(String::into_bytes),
        ]
    }

    fn now() -> impl Strategy<Value = SystemTime> {
        (0u64..=253_402_300_799).prop_map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parsing_never_panics_and_never_gives_more_than_ten_years(
            status in prop_oneof![Just(429u16), Just(503u16), any::<u16>()],
            header in header(),
            body in body(),
            now in now(),
        ) {
            if let Some(wait) = parse_retry_after(status, header.as_deref(), &body, now) {
                prop_assert!(wait <= ABSURD, "{wait:?}");
            }
        }

        #[test]
        fn only_429_and_503_answers_give_a_value(
            status in any::<u16>().prop_filter("not 429/503", |s| *s != 429 && *s != 503),
            header in header(),
            body in body(),
            now in now(),
        ) {
            prop_assert_eq!(parse_retry_after(status, header.as_deref(), &body, now), None);
        }

        #[test]
        fn a_delta_seconds_header_is_taken_whatever_the_body(
            status in prop_oneof![Just(429u16), Just(503u16)],
            secs in 0u64..=ABSURD.as_secs(),
            body in body(),
            now in now(),
        ) {
            let header = secs.to_string();
            prop_assert_eq!(
                parse_retry_after(status, Some(&header), &body, now),
                Some(Duration::from_secs(secs))
            );
        }
    }
}
