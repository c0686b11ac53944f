-- Which console session is signed in as which user, so that disabling or deleting
-- a user ends their sessions (the sessions themselves are tower-sessions' table).
CREATE TABLE console_sessions (
    session_id  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX console_sessions_by_user ON console_sessions (user_id);
