//! Keyset pagination, the same for every listing of the REST API: `limit` (1 to 250,
//! 50 by default) and `cursor` in, `{"data", "nextCursor"}` out, newest first.
//!
//! A cursor names the listing's project and the last item of the page before it
//! (base64url of `{project}/{id}`). Storage reads the next page as `id < last` on an
//! `(owner, id)` index, so every page costs the same however deep it is; and a cursor
//! of another project or of another listing is refused with 422 `invalid_cursor`
//! instead of being quietly read as a position.

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use super::views::PageOf;
use crate::domain::SpaceId;
use crate::http::error::ApiError;
use crate::storage::Page;

/// Items per page when the request does not say.
pub const DEFAULT_LIMIT: i64 = 50;
/// The most items one page may have.
pub const MAX_LIMIT: i64 = 250;

/// `limit` and `cursor` of a keyset-paginated listing.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// At most this many items: 1 to 250, 50 by default.
    #[serde(default)]
    #[param(minimum = 1, maximum = 250)]
    pub limit: Option<i64>,
    /// The `nextCursor` of the previous page of the same listing, unchanged.
    #[serde(default)]
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    pub cursor: Option<String>,
}

/// A listing's query string; a malformed one (an unknown parameter, a `limit` that is
/// not a number) answers 422 `invalid_query` in JSON like every other error.
pub fn query<Q>(q: Result<Query<Q>, QueryRejection>) -> Result<Q, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::invalid("invalid_query", e.body_text()))
}

/// One page of one project's listing of items with IDs of type `I`.
#[derive(Debug)]
pub struct Keyset<I> {
    space: SpaceId,
    limit: i64,
    before: Option<I>,
}

impl<I> Keyset<I>
where
    I: Copy + std::str::FromStr + std::fmt::Display,
{
    /// Checks `limit` (422 `invalid_limit`) and `cursor` (422 `invalid_cursor`).
    pub fn new(space: SpaceId, limit: Option<i64>, cursor: Option<&str>) -> Result<Self, ApiError> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l @ 1..=MAX_LIMIT) => l,
            Some(l) => {
                return Err(ApiError::invalid(
                    "invalid_limit",
                    format!("limit must be between 1 and {MAX_LIMIT}, not {l}"),
                ))
            }
        };
        let before = cursor.map(|c| decode(space, c)).transpose()?;
        Ok(Self {
            space,
            limit,
            before,
        })
    }

    /// What to ask storage for: one item more than the page holds, so the answer knows
    /// whether another page follows.
    pub fn page(&self) -> Page<I> {
        Page {
            before: self.before,
            limit: self.limit + 1,
        }
    }

    /// The answer: at most `limit` items (storage gave them newest first) and, when more
    /// follow, the cursor of the next page; `null` on the last page.
    pub fn answer<T, V>(
        &self,
        mut rows: Vec<T>,
        id: impl Fn(&T) -> I,
        view: impl FnMut(&T) -> V,
    ) -> PageOf<V> {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        let next_cursor = rows
            .last()
            .filter(|_| more)
            .map(|last| encode(self.space, &id(last)));
        PageOf {
            data: rows.iter().map(view).collect(),
            next_cursor,
        }
    }
}

fn encode(space: SpaceId, last: &impl std::fmt::Display) -> String {
    URL_SAFE_NO_PAD.encode(format!("{space}/{last}"))
}

fn decode<I: std::str::FromStr>(space: SpaceId, cursor: &str) -> Result<I, ApiError> {
    let invalid = |message: &str| ApiError::invalid("invalid_cursor", message);
    let text = URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let Some((project, last)) = text.as_deref().and_then(|t| t.split_once('/')) else {
        return Err(invalid(
            "cursor is not one this API gave: pass the `nextCursor` of the previous page unchanged",
        ));
    };
    if project.parse::<SpaceId>().ok() != Some(space) {
        return Err(invalid(
            "this cursor was given for another project's listing",
        ));
    }
    last.parse()
        .map_err(|_| invalid("this cursor was given for another listing"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ChannelId, EventId};

    fn keyset(space: SpaceId, cursor: Option<&str>) -> Result<Keyset<ChannelId>, ApiError> {
        Keyset::new(space, Some(2), cursor)
    }

    fn code(err: ApiError) -> &'static str {
        match err {
            ApiError::Invalid { code, .. } => code,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pages_run_newest_first_and_the_last_one_has_no_cursor() {
        let space = SpaceId::new();
        let ids: Vec<ChannelId> = (0..5)
            .map(|i| ChannelId::lower_bound_at(1_000 + i))
            .collect();
        // What storage would answer: newest first, below the cursor, `limit + 1` of them.
        let storage = |page: Page<ChannelId>| -> Vec<ChannelId> {
            let mut rows: Vec<ChannelId> = ids
                .iter()
                .rev()
                .copied()
                .filter(|id| page.before.is_none_or(|b| *id < b))
                .collect();
            rows.truncate(page.limit as usize);
            rows
        };
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for expected_len in [2, 2, 1] {
            let k = keyset(space, cursor.as_deref()).unwrap();
            let answer = k.answer(storage(k.page()), |c| *c, |c| *c);
            assert_eq!(answer.data.len(), expected_len);
            seen.extend(answer.data);
            cursor = answer.next_cursor;
        }
        assert!(cursor.is_none(), "no cursor after the last page");
        assert_eq!(seen, ids.iter().rev().copied().collect::<Vec<_>>());

        // A full last page has no cursor either: nobody is sent to an empty page.
        let k = Keyset::<ChannelId>::new(space, Some(5), None).unwrap();
        assert!(k
            .answer(storage(k.page()), |c| *c, |c| *c)
            .next_cursor
            .is_none());
    }

    #[test]
    fn cursors_of_other_projects_or_listings_and_garbage_are_refused() {
        let (mine, theirs) = (SpaceId::new(), SpaceId::new());
        let theirs_cursor = encode(theirs, &ChannelId::new());
        let err = keyset(mine, Some(&theirs_cursor)).unwrap_err();
        assert!(err.to_string().contains("another project"), "{err}");
        let events_cursor = encode(mine, &EventId::new());
        let err = keyset(mine, Some(&events_cursor)).unwrap_err();
        assert!(err.to_string().contains("another listing"), "{err}");
        for garbage in [
            "nope",
            "",
            "!!",
            &URL_SAFE_NO_PAD.encode("no slash"),
            "chn_01jdqz8x9k5v3w2r1t0m4n6p8q",
        ] {
            assert_eq!(
                code(keyset(mine, Some(garbage)).unwrap_err()),
                "invalid_cursor",
                "{garbage:?}"
            );
        }
        assert!(keyset(mine, Some(&encode(mine, &ChannelId::new()))).is_ok());
    }

    #[test]
    fn limit_is_one_to_two_hundred_fifty() {
        let space = SpaceId::new();
        for bad in [0, -1, 251] {
            let err = Keyset::<ChannelId>::new(space, Some(bad), None).unwrap_err();
            assert_eq!(code(err), "invalid_limit");
        }
        assert_eq!(
            Keyset::<ChannelId>::new(space, None, None).unwrap().limit,
            50
        );
        assert_eq!(
            Keyset::<ChannelId>::new(space, Some(250), None)
                .unwrap()
                .page()
                .limit,
            251
        );
    }
}
