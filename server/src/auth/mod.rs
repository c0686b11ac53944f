//! Secrets: console passwords (argon2) and the high-entropy tokens we hand out
//! (API keys, bot and incoming-webhook tokens), of which only a SHA-256 is stored.

use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use rand::distributions::Alphanumeric;
use rand::Rng;
use sha2::{Digest, Sha256};

/// Hashes a console password with argon2id and a fresh salt (PHC string).
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing password: {e}"))
}

/// Whether `password` matches the PHC `hash`. A malformed hash never matches.
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Burns the time of one verification, so an unknown email answers as slowly as a wrong password.
pub fn verify_password_against_nothing(password: &str) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let hash = DUMMY.get_or_init(|| hash_password("not a real password").unwrap_or_default());
    let _ = verify_password(password, hash);
}

/// The rules a new console password must meet; `Err` says why it is refused.
pub fn check_new_password(password: &str) -> Result<(), &'static str> {
    if password.chars().count() < 10 {
        return Err("a password needs at least 10 characters");
    }
    if password.len() > 1024 {
        return Err("a password may have at most 1024 bytes");
    }
    Ok(())
}

/// A new random token `prefix_` + 40 alphanumeric characters (about 238 bits).
pub fn new_token(prefix: &str) -> String {
    let body: String = rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    format!("{prefix}_{body}")
}

/// The stored form of a token: hex SHA-256. Tokens are random, so no salt or stretching is needed.
pub fn hash_token(token: &str) -> String {
    // Hex by the `hex` crate: a `format!` per byte was ~15 K instructions a request.
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("wrong horse battery", &hash));
        assert!(!verify_password("correct horse battery", "not a hash"));
    }

    #[test]
    fn short_passwords_are_refused() {
        assert!(check_new_password("short").is_err());
        assert!(check_new_password("long enough!").is_ok());
    }

    #[test]
    fn tokens_are_fresh_and_hash_stably() {
        let a = new_token("pfk");
        let b = new_token("pfk");
        assert_ne!(a, b);
        assert!(a.starts_with("pfk_") && a.len() == 44);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_eq!(hash_token(&a).len(), 64);
        // Lowercase hex of SHA-256, as stored (FIPS 180-2's example).
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
