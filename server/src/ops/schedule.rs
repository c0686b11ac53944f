//! Scheduled delivery (docs §2.1): when a published event's deliveries go out. A
//! publisher may ask for a time (`deliverAt`, RFC 3339 like every time the API
//! writes) at most [`MAX_AHEAD_MS`] ahead; a time already past, or none, means now.

use crate::domain::UnixMs;

use super::OpsError;

/// How far ahead an event may be scheduled: 30 days.
pub const MAX_AHEAD_MS: i64 = 30 * 24 * 3600 * 1000;

/// When the deliveries of an event published at `now` with `requested` go out:
/// `None` for at once (nothing asked, or a time not after `now`), else the time asked.
pub fn deliver_at(requested: Option<&str>, now: UnixMs) -> Result<Option<UnixMs>, OpsError> {
    let Some(text) = requested else {
        return Ok(None);
    };
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|_| {
            OpsError::invalid(
                "invalid_deliver_at",
                format!("deliverAt {text:?} is not an RFC 3339 time such as 2026-12-01T15:30:00Z"),
            )
        })?;
    if at > now + MAX_AHEAD_MS {
        return Err(OpsError::invalid(
            "invalid_deliver_at",
            format!(
                "deliverAt may be at most 30 days ahead, until {}",
                crate::clock::rfc3339(now + MAX_AHEAD_MS)
            ),
        ));
    }
    Ok((at > now).then_some(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T15:30:00Z.
    const NOW: UnixMs = 1_796_139_000_000;

    fn code(r: Result<Option<UnixMs>, OpsError>) -> &'static str {
        match r {
            Err(OpsError::Invalid { code, .. }) => code,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn absent_or_past_is_now_and_a_time_ahead_is_kept() {
        assert_eq!(deliver_at(None, NOW).unwrap(), None);
        assert_eq!(deliver_at(Some("2026-12-01T15:29:59Z"), NOW).unwrap(), None);
        assert_eq!(deliver_at(Some("2026-12-01T15:30:00Z"), NOW).unwrap(), None);
        assert_eq!(
            deliver_at(Some("2026-12-01T15:30:01.500Z"), NOW).unwrap(),
            Some(NOW + 1_500)
        );
        // Any offset, read as the same instant.
        assert_eq!(
            deliver_at(Some("2026-12-01T17:30:02+02:00"), NOW).unwrap(),
            Some(NOW + 2_000)
        );
    }

    #[test]
    fn at_most_thirty_days_ahead() {
        assert_eq!(
            deliver_at(Some("2026-12-31T15:30:00Z"), NOW).unwrap(),
            Some(NOW + MAX_AHEAD_MS)
        );
        assert_eq!(
            code(deliver_at(Some("2026-12-31T15:30:00.001Z"), NOW)),
            "invalid_deliver_at"
        );
    }

    #[test]
    fn only_rfc_3339_is_a_time() {
        for bad in [
            "tomorrow",
            "1796139000000",
            "2026-12-01 15:30:00",
            "2026-12-01",
            "",
        ] {
            assert_eq!(
                code(deliver_at(Some(bad), NOW)),
                "invalid_deliver_at",
                "{bad}"
            );
        }
    }
}
