//! The secrets we hand out — API keys, bot tokens, incoming-webhook tokens — minted in
//! one place, each kind with its prefix so a leaked one is recognisable, and revoked
//! the same way whoever asks.
//!
//! A secret is `prefix_` + 40 random alphanumeric characters ([`crate::auth::new_token`]);
//! only its SHA-256 is stored, and the clear text is shown once, in the answer that
//! made it. Revoking is for good and answers the same when repeated: revoking an
//! already revoked key or bot succeeds and keeps the first revocation's time.

use serde_json::{json, Value};

use super::audit::Author;
use super::names::{self, NameKind};
use super::OpsError;
use crate::auth;
use crate::domain::*;
use crate::storage::{Storage, StorageError};

/// A kind of secret we hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer pfk_…` for the REST API of one space.
    ApiKey,
    /// `Authorization: Bot pfb_…` for the Bot API.
    BotToken,
    /// The last segment of an incoming webhook's URL, `/hooks/{id}/pfh_…`.
    IncomingWebhookToken,
}

/// The characters of a secret kept in clear to tell API keys apart (`pfk_` + 8).
pub const DISPLAY_PREFIX_CHARS: usize = 12;

impl Credential {
    /// What every secret of this kind starts with (before the `_`).
    pub const fn prefix(self) -> &'static str {
        match self {
            Credential::ApiKey => "pfk",
            Credential::BotToken => "pfb",
            Credential::IncomingWebhookToken => "pfh",
        }
    }

    /// A new secret of this kind.
    pub fn mint(self) -> Minted {
        let secret = auth::new_token(self.prefix());
        Minted {
            hash: auth::hash_token(&secret),
            display_prefix: secret[..DISPLAY_PREFIX_CHARS].to_owned(),
            secret,
        }
    }
}

/// A freshly minted secret.
pub struct Minted {
    /// The clear text: shown once, never stored or logged.
    pub secret: String,
    /// What is stored: hex SHA-256 of the secret.
    pub hash: String,
    /// The first characters, kept to tell keys apart in listings.
    pub display_prefix: String,
}

/// A new API key record named `name` (checked) and its secret; not stored yet.
pub fn new_api_key(
    space_id: SpaceId,
    name: &str,
    now: UnixMs,
) -> Result<(ApiKey, Minted), OpsError> {
    let name = names::parse(NameKind::ApiKey, name)?;
    let minted = Credential::ApiKey.mint();
    let key = ApiKey {
        id: ApiKeyId::new(),
        space_id,
        name,
        prefix: minted.display_prefix.clone(),
        created_at: now,
        last_used_at: None,
        revoked_at: None,
    };
    Ok((key, minted))
}

/// Mints and stores an API key named `name` for the space; the secret is in the answer.
pub async fn create_api_key(
    store: &dyn Storage,
    space_id: SpaceId,
    name: &str,
    now: UnixMs,
    author: Option<&Author>,
) -> Result<(ApiKey, Minted), OpsError> {
    let (key, minted) = new_api_key(space_id, name, now)?;
    let audit = author.map(|a| {
        a.entry(
            AuditAction::ApiKeyCreate,
            Some(space_id),
            key.id,
            json!({ "name": key.name }),
            now,
        )
    });
    store
        .create_api_key(&key, &minted.hash, audit.as_ref())
        .await?;
    Ok((key, minted))
}

/// A new bot named `name` (checked) and its token; not stored yet.
pub fn new_bot(space_id: SpaceId, name: &str, now: UnixMs) -> Result<(Bot, Minted), OpsError> {
    let name = names::parse(NameKind::Bot, name)?;
    let minted = Credential::BotToken.mint();
    let bot = Bot {
        id: BotId::new(),
        space_id,
        name,
        token_hash: minted.hash.clone(),
        created_at: now,
        revoked_at: None,
    };
    Ok((bot, minted))
}

/// Revokes the space's API key `id`: afterwards it answers 401. Revoking a revoked key
/// answers the same; a key that is not the space's is not found.
pub async fn revoke_api_key(
    store: &dyn Storage,
    space_id: SpaceId,
    id: &str,
    now: UnixMs,
    author: &Author,
) -> Result<ApiKey, OpsError> {
    let not_found = || OpsError::not_found("API key", id);
    let key_id: ApiKeyId = id.parse().map_err(|_| not_found())?;
    // A space has few keys: its list is read rather than adding a storage method.
    let find = || async {
        let keys = store.list_all_api_keys(space_id).await?;
        keys.into_iter()
            .find(|k| k.id == key_id)
            .ok_or_else(not_found)
    };
    let mut key = find().await?;
    if key.revoked_at.is_some() {
        return Ok(key);
    }
    let audit = author.entry(
        AuditAction::ApiKeyRevoke,
        Some(space_id),
        key_id,
        Value::Null,
        now,
    );
    match store
        .revoke_api_key(space_id, key_id, now, Some(&audit))
        .await
    {
        Ok(()) => key.revoked_at = Some(now),
        // Revoked meanwhile by another request: answer what it wrote.
        Err(StorageError::NotFound) => key = find().await?,
        Err(e) => return Err(e.into()),
    }
    Ok(key)
}

/// Revokes the space's bot `id` for good: its token answers 401 from then on. Revoking
/// a revoked bot answers the same; a bot that is not the space's is not found.
pub async fn revoke_bot(
    store: &dyn Storage,
    space_id: SpaceId,
    id: &str,
    now: UnixMs,
    author: &Author,
) -> Result<Bot, OpsError> {
    let mut bot = find_bot(store, space_id, id).await?;
    if bot.revoked_at.is_some() {
        return Ok(bot);
    }
    let audit = author.entry(
        AuditAction::BotRevoke,
        Some(space_id),
        bot.id,
        Value::Null,
        now,
    );
    match store.revoke_bot(space_id, bot.id, now, Some(&audit)).await {
        Ok(()) => bot.revoked_at = Some(now),
        Err(StorageError::NotFound) => bot = find_bot(store, space_id, id).await?,
        Err(e) => return Err(e.into()),
    }
    Ok(bot)
}

/// The space's bot `id`, revoked ones included.
pub async fn find_bot(store: &dyn Storage, space_id: SpaceId, id: &str) -> Result<Bot, OpsError> {
    let not_found = || OpsError::not_found("bot", id);
    let bot_id: BotId = id.parse().map_err(|_| not_found())?;
    // Storage has no `get_bot`; a space has few bots, so its list is scanned.
    store
        .list_all_bots(space_id)
        .await?
        .into_iter()
        .find(|b| b.id == bot_id)
        .ok_or_else(not_found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn well_formed(secret: &str, prefix: &str) -> bool {
        secret
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|body| body.len() == 40 && body.chars().all(|c| c.is_ascii_alphanumeric()))
    }

    #[test]
    fn each_kind_has_its_own_prefix() {
        assert_eq!(Credential::ApiKey.prefix(), "pfk");
        assert_eq!(Credential::BotToken.prefix(), "pfb");
        assert_eq!(Credential::IncomingWebhookToken.prefix(), "pfh");
    }

    #[test]
    fn a_minted_secret_is_prefix_underscore_forty_alphanumerics_and_fresh() {
        for kind in [
            Credential::ApiKey,
            Credential::BotToken,
            Credential::IncomingWebhookToken,
        ] {
            let a = kind.mint();
            assert!(well_formed(&a.secret, kind.prefix()), "{kind:?}");
            assert_ne!(a.secret, kind.mint().secret);
        }
    }

    #[test]
    fn only_the_hash_and_the_display_prefix_are_kept() {
        let m = Credential::ApiKey.mint();
        assert_eq!(m.hash, auth::hash_token(&m.secret));
        assert_eq!(m.display_prefix.len(), DISPLAY_PREFIX_CHARS);
        assert!(m.secret.starts_with(&m.display_prefix));
        assert!(m.display_prefix.starts_with("pfk_"));
    }

    #[test]
    fn a_new_api_key_and_bot_take_the_name_rule() {
        let space = SpaceId::new();
        let (key, minted) = new_api_key(space, "  ci  ", 5).unwrap();
        assert_eq!(
            (key.name.as_str(), key.prefix.as_str()),
            ("ci", &minted.display_prefix[..])
        );
        assert!(new_api_key(space, " ", 5).is_err());
        let (bot, minted) = new_bot(space, "deploy-bot", 5).unwrap();
        assert_eq!(bot.token_hash, minted.hash);
        assert!(new_bot(space, &"x".repeat(101), 5).is_err());
    }
}
