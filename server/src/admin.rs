//! Operations shared by the CLI and the console for managing spaces and users.

use anyhow::Context as _;

use crate::auth;
use crate::clock::now_ms;
use crate::domain::*;
use crate::storage::{Storage, StorageError};

pub struct CreatedSpace {
    pub space: Space,
    /// The API key in clear text; shown once, only its hash is kept.
    pub api_key: String,
}

/// Creates a space with a first API key.
pub async fn create_space(
    store: &dyn Storage,
    name: &str,
    plan: Plan,
) -> anyhow::Result<CreatedSpace> {
    let name = name.trim();
    anyhow::ensure!(
        !name.is_empty() && name.len() <= 200,
        "a space name needs 1 to 200 characters"
    );
    let now = now_ms();
    let space = Space {
        id: SpaceId::new(),
        name: name.to_owned(),
        plan,
        created_at: now,
    };
    store
        .create_space(&space)
        .await
        .context("creating the space")?;
    let api_key = auth::new_token("pfk");
    let key = ApiKey {
        id: ApiKeyId::new(),
        space_id: space.id,
        name: "default".into(),
        prefix: api_key[..12].to_owned(),
        created_at: now,
        last_used_at: None,
        revoked_at: None,
    };
    store
        .create_api_key(&key, &auth::hash_token(&api_key))
        .await
        .context("creating the API key")?;
    Ok(CreatedSpace { space, api_key })
}

/// Creates a console user after checking the email and the password rules.
pub async fn create_user(
    store: &dyn Storage,
    email: &str,
    password: &str,
    role: Role,
) -> anyhow::Result<User> {
    let user = new_user(email, password, role)?;
    match store.create_user(&user).await {
        Ok(()) => Ok(user),
        Err(StorageError::Conflict(_)) => {
            anyhow::bail!("a user with the email {} already exists", user.email)
        }
        Err(e) => Err(e).context("creating the user"),
    }
}

/// A console user, not stored yet: the email and the password rules checked, the
/// password hashed.
pub fn new_user(email: &str, password: &str, role: Role) -> anyhow::Result<User> {
    let email = email.trim().to_lowercase();
    anyhow::ensure!(
        email.len() <= 254
            && email
                .split_once('@')
                .is_some_and(|(a, b)| !a.is_empty() && b.contains('.')),
        "{email:?} is not an email address"
    );
    auth::check_new_password(password).map_err(|why| anyhow::anyhow!(why))?;
    Ok(User {
        id: UserId::new(),
        email,
        password_hash: auth::hash_password(password)?,
        role,
        created_at: now_ms(),
        disabled_at: None,
    })
}
