//! Standard Webhooks signatures (docs §2.9): the `whsec_` secrets we hand out, the
//! `webhook-signature` header we send (one `v1,` signature per valid secret during a
//! rotation), and the check of that header on incoming webhooks (docs §3).
//!
//! The signed message is `{webhook-id}.{webhook-timestamp}.{body}`, the key is the
//! base64-decoded part of the secret after `whsec_`, the MAC is HMAC-SHA256.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const SECRET_PREFIX: &str = "whsec_";
const SIGNATURE_VERSION: &str = "v1,";
/// Random bytes in a new secret (192 bits).
const SECRET_BYTES: usize = 24;

/// A signing secret that cannot be used; it was stored or configured wrongly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("a signing secret must start with \"whsec_\"")]
    MissingPrefix,
    #[error("a signing secret must be base64 after \"whsec_\"")]
    InvalidBase64,
    #[error("a signing secret must not be empty after \"whsec_\"")]
    EmptyKey,
}

/// Why an incoming webhook's signature was refused (answered with 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the webhook-timestamp header is missing")]
    MissingTimestamp,
    #[error("the webhook-timestamp header is not a unix time in seconds")]
    InvalidTimestamp,
    #[error("the webhook-timestamp is too old (more than {tolerance_secs} s in the past)")]
    TimestampTooOld { tolerance_secs: i64 },
    #[error("the webhook-timestamp is too new (more than {tolerance_secs} s in the future)")]
    TimestampTooNew { tolerance_secs: i64 },
    #[error("the webhook-signature header is missing")]
    MissingSignature,
    #[error("no signature in webhook-signature matches")]
    NoMatchingSignature,
    #[error(transparent)]
    Secret(#[from] SigningError),
}

/// A new secret: `whsec_` + base64 of 24 random bytes from the OS generator.
pub fn new_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", BASE64.encode(key))
}

/// `v1,<base64 HMAC-SHA256>` of `{msg_id}.{timestamp}.{body}`.
///
/// Fails only on a malformed secret (no `whsec_` prefix, bad base64, empty key).
pub fn sign(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, SigningError> {
    let mac = keyed_mac(secret)?;
    let tag = signed_content(mac, msg_id, timestamp, body)
        .finalize()
        .into_bytes();
    Ok(format!("{SIGNATURE_VERSION}{}", BASE64.encode(tag)))
}

/// The `webhook-signature` header: one signature per secret, space-separated, so a
/// receiver still on the old secret verifies during a rotation. One bad secret fails it all.
pub fn signature_header(
    secrets: &[&str],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, SigningError> {
    let signatures = secrets
        .iter()
        .map(|secret| sign(secret, msg_id, timestamp, body))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(signatures.join(" "))
}

/// Checks an incoming webhook signed the Standard Webhooks way.
///
/// The timestamp must be within `tolerance_secs` of `now_unix` either way (replay
/// protection); then any of the space-separated `v1,` signatures must match, compared
/// in constant time. Signatures of other versions are skipped.
pub fn verify(
    secret: &str,
    msg_id: &str,
    timestamp_header: &str,
    body: &[u8],
    signature_header: &str,
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    let mac = keyed_mac(secret)?;

    let timestamp_text = timestamp_header.trim();
    if timestamp_text.is_empty() {
        return Err(VerifyError::MissingTimestamp);
    }
    let timestamp: i64 = timestamp_text
        .parse()
        .map_err(|_| VerifyError::InvalidTimestamp)?;
    if timestamp < now_unix.saturating_sub(tolerance_secs) {
        return Err(VerifyError::TimestampTooOld { tolerance_secs });
    }
    if timestamp > now_unix.saturating_add(tolerance_secs) {
        return Err(VerifyError::TimestampTooNew { tolerance_secs });
    }

    if signature_header.trim().is_empty() {
        return Err(VerifyError::MissingSignature);
    }
    let expected = signed_content(mac, msg_id, timestamp, body);
    let matches = signature_header
        .split_whitespace()
        .filter_map(|candidate| candidate.strip_prefix(SIGNATURE_VERSION))
        .filter_map(|b64| BASE64.decode(b64).ok())
        .any(|tag| expected.clone().verify_slice(&tag).is_ok());
    if matches {
        Ok(())
    } else {
        Err(VerifyError::NoMatchingSignature)
    }
}

fn keyed_mac(secret: &str) -> Result<HmacSha256, SigningError> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or(SigningError::MissingPrefix)?;
    let key = BASE64
        .decode(encoded)
        .map_err(|_| SigningError::InvalidBase64)?;
    if key.is_empty() {
        return Err(SigningError::EmptyKey);
    }
    // HMAC takes a key of any length; this cannot fail.
    HmacSha256::new_from_slice(&key).map_err(|_| SigningError::InvalidBase64)
}

fn signed_content(mut mac: HmacSha256, msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published Standard Webhooks test vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn verify_now(secret: &str, header: &str, now: i64) -> Result<(), VerifyError> {
        verify(
            secret,
            MSG_ID,
            &TIMESTAMP.to_string(),
            BODY,
            header,
            now,
            300,
        )
    }

    #[test]
    fn signing_the_published_test_vector_gives_the_published_signature() {
        assert_eq!(sign(SECRET, MSG_ID, TIMESTAMP, BODY).unwrap(), SIGNATURE);
    }

    #[test]
    fn the_published_test_vector_verifies() {
        assert_eq!(verify_now(SECRET, SIGNATURE, TIMESTAMP), Ok(()));
    }

    #[test]
    fn a_new_secret_is_whsec_and_24_random_bytes_of_base64_and_signs() {
        let a = new_secret();
        let b = new_secret();
        assert_ne!(a, b);
        let key = BASE64.decode(a.strip_prefix("whsec_").unwrap()).unwrap();
        assert_eq!(key.len(), 24);
        assert_eq!(a.len(), "whsec_".len() + 32);
        let sig = sign(&a, MSG_ID, TIMESTAMP, BODY).unwrap();
        assert_eq!(verify_now(&a, &sig, TIMESTAMP), Ok(()));
    }

    #[test]
    fn a_rotation_header_carries_one_signature_per_secret_and_either_secret_verifies() {
        let new = new_secret();
        let header = signature_header(&[SECRET, &new], MSG_ID, TIMESTAMP, BODY).unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], SIGNATURE);
        assert_eq!(parts[1], sign(&new, MSG_ID, TIMESTAMP, BODY).unwrap());
        assert_eq!(verify_now(SECRET, &header, TIMESTAMP), Ok(()));
        assert_eq!(verify_now(&new, &header, TIMESTAMP), Ok(()));
        assert_eq!(
            verify_now(&new_secret(), &header, TIMESTAMP),
            Err(VerifyError::NoMatchingSignature)
        );
    }

    #[test]
    fn a_single_secret_header_is_just_its_signature() {
        assert_eq!(
            signature_header(&[SECRET], MSG_ID, TIMESTAMP, BODY).unwrap(),
            SIGNATURE
        );
    }

    #[test]
    fn a_tampered_body_id_or_timestamp_does_not_verify() {
        let r = verify(
            SECRET,
            MSG_ID,
            "1614265330",
            br#"{"test": 2432232315}"#,
            SIGNATURE,
            TIMESTAMP,
            300,
        );
        assert_eq!(r, Err(VerifyError::NoMatchingSignature));
        let r = verify(
            SECRET,
            "msg_other",
            "1614265330",
            BODY,
            SIGNATURE,
            TIMESTAMP,
            300,
        );
        assert_eq!(r, Err(VerifyError::NoMatchingSignature));
        let r = verify(
            SECRET,
            MSG_ID,
            "1614265331",
            BODY,
            SIGNATURE,
            TIMESTAMP,
            300,
        );
        assert_eq!(r, Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn a_tampered_or_malformed_signature_does_not_verify() {
        let flipped = SIGNATURE.replace("g0hM", "g0hN");
        for header in [
            flipped.as_str(),
            "v1,not-base64!",
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1,g0hM9SsE+OTPJTGt",
            "v1,",
        ] {
            assert_eq!(
                verify_now(SECRET, header, TIMESTAMP),
                Err(VerifyError::NoMatchingSignature),
                "{header}"
            );
        }
    }

    #[test]
    fn any_matching_signature_among_several_is_enough() {
        let header = format!("v1a,xyz v1,AAAA {SIGNATURE}  v2,whatever");
        assert_eq!(verify_now(SECRET, &header, TIMESTAMP), Ok(()));
    }

    #[test]
    fn a_timestamp_within_the_tolerance_either_way_is_accepted() {
        assert_eq!(verify_now(SECRET, SIGNATURE, TIMESTAMP + 300), Ok(()));
        assert_eq!(verify_now(SECRET, SIGNATURE, TIMESTAMP - 300), Ok(()));
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_is_too_old_or_too_new() {
        assert_eq!(
            verify_now(SECRET, SIGNATURE, TIMESTAMP + 301),
            Err(VerifyError::TimestampTooOld {
                tolerance_secs: 300
            })
        );
        assert_eq!(
            verify_now(SECRET, SIGNATURE, TIMESTAMP - 301),
            Err(VerifyError::TimestampTooNew {
                tolerance_secs: 300
            })
        );
    }

    #[test]
    fn a_missing_or_unparsable_timestamp_is_refused() {
        let check = |ts: &str| verify(SECRET, MSG_ID, ts, BODY, SIGNATURE, TIMESTAMP, 300);
        assert_eq!(check(""), Err(VerifyError::MissingTimestamp));
        assert_eq!(check("  "), Err(VerifyError::MissingTimestamp));
        assert_eq!(check("yesterday"), Err(VerifyError::InvalidTimestamp));
        assert_eq!(check("1614265330.5"), Err(VerifyError::InvalidTimestamp));
        assert_eq!(
            check("99999999999999999999"),
            Err(VerifyError::InvalidTimestamp)
        );
        assert_eq!(check(" 1614265330 "), Ok(()));
    }

    #[test]
    fn extreme_timestamps_and_tolerances_do_not_overflow() {
        let min = i64::MIN.to_string();
        let r = verify(SECRET, MSG_ID, &min, BODY, SIGNATURE, i64::MIN, i64::MAX);
        assert_eq!(r, Err(VerifyError::NoMatchingSignature));
        let r = verify(SECRET, MSG_ID, &min, BODY, SIGNATURE, i64::MAX, i64::MAX);
        assert_eq!(
            r,
            Err(VerifyError::TimestampTooOld {
                tolerance_secs: i64::MAX
            })
        );
        let max = i64::MAX.to_string();
        let r = verify(SECRET, MSG_ID, &max, BODY, SIGNATURE, i64::MIN, 0);
        assert_eq!(r, Err(VerifyError::TimestampTooNew { tolerance_secs: 0 }));
    }

    #[test]
    fn a_missing_signature_header_is_refused() {
        assert_eq!(
            verify_now(SECRET, "  ", TIMESTAMP),
            Err(VerifyError::MissingSignature)
        );
    }

    #[test]
    fn a_malformed_secret_is_an_error_not_a_signature() {
        assert_eq!(
            sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", MSG_ID, TIMESTAMP, BODY),
            Err(SigningError::MissingPrefix)
        );
        assert_eq!(
            sign("whsec_not base64!", MSG_ID, TIMESTAMP, BODY),
            Err(SigningError::InvalidBase64)
        );
        assert_eq!(
            sign("whsec_", MSG_ID, TIMESTAMP, BODY),
            Err(SigningError::EmptyKey)
        );
        assert_eq!(
            signature_header(&[SECRET, "nope"], MSG_ID, TIMESTAMP, BODY),
            Err(SigningError::MissingPrefix)
        );
        assert_eq!(
            verify_now("nope", SIGNATURE, TIMESTAMP),
            Err(VerifyError::Secret(SigningError::MissingPrefix))
        );
    }
}
