//! [`ListPort`]: the console's long lists a page at a time (issue 16 item 6), so a space
//! with ten thousand destinations is a page of 50 and a search, not one huge table:
//! keyset pages on the time-sorted IDs and the search of `storage/search.rs`.

use app::error::ConsoleError;
use app::port::ListPort;
use app::types::*;

use super::{internal, parse_id, require_role, Backend};
use crate::domain::Role;
use crate::domain::*;
use crate::ops::search::{pick_destination, DestinationPick};
use crate::storage::Page;

/// Rows per page of the destinations list.
pub const DESTINATIONS_PAGE: i64 = 50;
/// Suggestions the deliveries page's destination field offers at once.
pub const DESTINATION_CHOICES: i64 = 50;

/// How a destination appears in a suggestion: its name and URL, and its space when the
/// list covers every space.
pub(super) fn choice(d: &Destination, space_name: Option<&str>) -> Choice {
    Choice {
        value: d.id.to_string(),
        label: match space_name {
            Some(s) => format!("{} ({}, {s})", d.name(), d.url),
            None => format!("{} ({})", d.name(), d.url),
        },
    }
}

impl Backend {
    /// At most `limit` destinations of `space` (or all) that `pattern` matches, as suggestions.
    pub(super) async fn destination_suggestions(
        &self,
        space: Option<SpaceId>,
        pattern: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Choice>, ConsoleError> {
        let spaces = self.space_names().await?;
        let found = self
            .storage
            .search_destinations(space, pattern, Page::first(limit))
            .await
            .map_err(internal)?;
        Ok(found
            .iter()
            .map(|d| {
                let name = space.is_none().then(|| {
                    spaces
                        .get(&d.space_id)
                        .map(|s| s.name.as_str())
                        .unwrap_or("")
                });
                choice(d, name)
            })
            .collect())
    }
}

fn space_of(space: &str) -> Result<Option<SpaceId>, ConsoleError> {
    match space.trim() {
        "" => Ok(None),
        s => parse_id::<SpaceId>(s, "space").map(Some),
    }
}

#[async_trait::async_trait]
impl ListPort for Backend {
    async fn destination_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> Result<DestinationList, ConsoleError> {
        require_role(actor, Role::Support)?;
        let space = space_of(&query.space)?;
        let before = match query.before.trim() {
            "" => None,
            b => Some(parse_id::<DestinationId>(b, "page cursor")?),
        };
        let mut out = DestinationList {
            rows: Vec::new(),
            next_cursor: None,
            filter_error: None,
        };
        let pick = pick_destination(&query.q);
        let pattern = match &pick {
            DestinationPick::Matching(p) => Some(p.as_str()),
            _ => None,
        };
        let found = match &pick {
            DestinationPick::TooShort => {
                out.filter_error = Some("Type at least 2 characters to search.".into());
                return Ok(out);
            }
            DestinationPick::Id(id) => match self.storage.get_destination_by_id(*id).await {
                Ok(d) if space.is_none_or(|s| s == d.space_id) => vec![d],
                Ok(_) | Err(crate::storage::StorageError::NotFound) => Vec::new(),
                Err(e) => return Err(internal(e)),
            },
            DestinationPick::Any | DestinationPick::Matching(_) => self
                .storage
                .search_destinations(
                    space,
                    pattern,
                    Page {
                        before,
                        limit: DESTINATIONS_PAGE,
                    },
                )
                .await
                .map_err(internal)?,
        };
        out.next_cursor = (found.len() as i64 == DESTINATIONS_PAGE)
            .then(|| found.last().map(|d| d.id.to_string()))
            .flatten();
        let spaces = self.space_names().await?;
        for d in &found {
            let name = spaces
                .get(&d.space_id)
                .map(|s| s.name.as_str())
                .unwrap_or("");
            out.rows.push(self.destination_view(d, name).await?);
        }
        Ok(out)
    }

    async fn destination_choices(
        &self,
        actor: &SessionUser,
        space: &str,
        typed: &str,
    ) -> Result<Vec<Choice>, ConsoleError> {
        require_role(actor, Role::Support)?;
        let space = space_of(space)?;
        match pick_destination(typed) {
            DestinationPick::Matching(p) => {
                self.destination_suggestions(space, Some(&p), DESTINATION_CHOICES)
                    .await
            }
            DestinationPick::Id(id) => {
                let d = self.storage.get_destination_by_id(id).await;
                Ok(d.ok()
                    .filter(|d| space.is_none_or(|s| s == d.space_id))
                    .map(|d| vec![choice(&d, None)])
                    .unwrap_or_default())
            }
            DestinationPick::Any | DestinationPick::TooShort => {
                self.destination_suggestions(space, None, DESTINATION_CHOICES)
                    .await
            }
        }
    }
}
