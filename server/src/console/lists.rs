//! [`ListPort`]: the console's long lists a page at a time (issue 16 item 6), so a space
//! with ten thousand destinations is a page of 50 and a search, not one huge table:
//! keyset pages on the time-sorted IDs and the search of `storage/search.rs`. Every list
//! (destinations, spaces, users, incoming webhooks, event types, a space's channels,
//! bots and API keys) has the same shape: [`ListPage`] of [`LIST_PAGE`] rows, newest
//! first, a search read by `ops::search::list_search`, the cursor the last row's ID.

use app::error::ConsoleError;
use app::port::ListPort;
use app::types::*;

use super::{internal, parse_id, require_role, Backend};
use crate::domain::Role;
use crate::domain::*;
use crate::ops::search::{list_search, pick_destination, DestinationPick, ListSearch};
use crate::storage::Page;

/// Rows per page of every long list.
pub const LIST_PAGE: i64 = 50;
/// What a refused search says.
const TOO_SHORT: &str = "Type at least 2 characters to search.";

/// Rows per page of the destinations list.
pub const DESTINATIONS_PAGE: i64 = LIST_PAGE;
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

/// A list's read: the `LIKE` pattern of its search (none for every row) and its page.
type Asked<I> = (Option<String>, Page<I>);

/// A list's search and cursor as asked for: `None` when the search is refused (too short).
fn ask<I: std::str::FromStr>(q: &str, before: &str) -> Result<Option<Asked<I>>, ConsoleError> {
    let before = match before.trim() {
        "" => None,
        b => Some(parse_id::<I>(b, "page cursor")?),
    };
    let page = Page {
        before,
        limit: LIST_PAGE,
    };
    Ok(match list_search(q) {
        ListSearch::Any => Some((None, page)),
        ListSearch::Matching(p) => Some((Some(p), page)),
        ListSearch::TooShort => None,
    })
}

/// The page of a list refused for its search.
fn refused<T>() -> ListPage<T> {
    ListPage {
        filter_error: Some(TOO_SHORT.into()),
        ..ListPage::default()
    }
}

/// The rows found, shown; with the cursor of the next page when the page is full.
fn paged<T, V>(found: &[T], id: impl Fn(&T) -> String, view: impl FnMut(&T) -> V) -> ListPage<V> {
    ListPage {
        next_cursor: (found.len() as i64 == LIST_PAGE)
            .then(|| found.last().map(&id))
            .flatten(),
        rows: found.iter().map(view).collect(),
        filter_error: None,
    }
}

fn channel(c: &Channel) -> ChannelView {
    ChannelView {
        id: c.id.to_string(),
        name: c.name.clone(),
        created_at: c.created_at,
    }
}

fn bot(b: &Bot) -> BotView {
    BotView {
        id: b.id.to_string(),
        name: b.name.clone(),
        created_at: b.created_at,
        revoked_at: b.revoked_at,
    }
}

fn api_key(k: &ApiKey) -> ApiKeyView {
    ApiKeyView {
        id: k.id.to_string(),
        name: k.name.clone(),
        prefix: k.prefix.clone(),
        created_at: k.created_at,
        last_used_at: k.last_used_at,
        revoked_at: k.revoked_at,
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
                out.filter_error = Some(TOO_SHORT.into());
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

    async fn space_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> Result<ListPage<SpaceView>, ConsoleError> {
        require_role(actor, Role::Support)?;
        let Some((pattern, page)) = ask::<SpaceId>(&query.q, &query.before)? else {
            return Ok(refused());
        };
        let found = self
            .storage
            .search_spaces(pattern.as_deref(), page)
            .await
            .map_err(internal)?;
        Ok(paged(&found, |s| s.id.to_string(), super::views::space))
    }

    async fn user_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> Result<ListPage<UserView>, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let Some((pattern, page)) = ask::<UserId>(&query.q, &query.before)? else {
            return Ok(refused());
        };
        let found = self
            .storage
            .search_users(pattern.as_deref(), page)
            .await
            .map_err(internal)?;
        Ok(paged(&found, |u| u.id.to_string(), super::views::user))
    }

    async fn incoming_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> Result<IncomingList, ConsoleError> {
        require_role(actor, Role::Support)?;
        let only = space_of(&query.space)?;
        let mut spaces: Vec<Space> = self.space_names().await?.into_values().collect();
        spaces.sort_by(|a, b| a.name.cmp(&b.name));
        // The create form's channels: the newest page of each space's.
        let mut channels = Vec::new();
        for s in spaces.iter().filter(|s| only.is_none_or(|o| o == s.id)) {
            let found = self
                .storage
                .search_channels(s.id, None, Page::first(LIST_PAGE))
                .await
                .map_err(internal)?;
            channels.extend(found.iter().map(|c| Choice {
                value: c.id.to_string(),
                label: format!("{} / #{}", s.name, c.name),
            }));
        }
        let Some((pattern, page)) = ask::<IncomingWebhookId>(&query.q, &query.before)? else {
            return Ok(IncomingList {
                hooks: refused(),
                channels,
            });
        };
        let found = self
            .storage
            .search_incoming_webhooks(only, pattern.as_deref(), page)
            .await
            .map_err(internal)?;
        // Each row's channel, read one each (at most a page).
        let mut names = std::collections::HashMap::new();
        for w in &found {
            if let std::collections::hash_map::Entry::Vacant(e) = names.entry(w.channel_id) {
                let name = match self.storage.get_channel_by_id(w.channel_id).await {
                    Ok(c) => c.name,
                    Err(_) => "?".to_owned(),
                };
                e.insert(name);
            }
        }
        let hooks = paged(
            &found,
            |w| w.id.to_string(),
            |w| {
                let space = spaces.iter().find(|s| s.id == w.space_id);
                let rate = space
                    .map(|s| self.config.limits.incoming_per_second.for_plan(s.plan))
                    .unwrap_or_default();
                super::views::incoming(
                    w,
                    space.map(|s| s.name.as_str()).unwrap_or(""),
                    names.get(&w.channel_id).map(String::as_str).unwrap_or("?"),
                    rate,
                )
            },
        );
        Ok(IncomingList { hooks, channels })
    }

    async fn event_type_list(
        &self,
        actor: &SessionUser,
        query: &ListQuery,
    ) -> Result<ListPage<CatalogEntry>, ConsoleError> {
        require_role(actor, Role::Support)?;
        let only = space_of(&query.space)?;
        let Some((pattern, page)) = ask::<EventTypeId>(&query.q, &query.before)? else {
            return Ok(refused());
        };
        let spaces = self.space_names().await?;
        let found = self
            .storage
            .search_event_types(only, pattern.as_deref(), page)
            .await
            .map_err(internal)?;
        Ok(paged(
            &found,
            |t| t.id.to_string(),
            |t| {
                let name = spaces.get(&t.space_id).map(|s| s.name.as_str());
                super::catalog::entry(t, name.unwrap_or(""))
            },
        ))
    }

    async fn space_page(
        &self,
        actor: &SessionUser,
        id: &str,
        query: &SpaceListQuery,
    ) -> Result<SpacePage, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: SpaceId = parse_id(id, "space")?;
        let space = self
            .storage
            .get_space(id)
            .await
            .map_err(|e| super::storage_error(e, "space"))?;
        let detail = SpaceDetail {
            space: super::views::space(&space),
            channels: Vec::new(),
            bots: Vec::new(),
            api_keys: Vec::new(),
            retention: space.retention.map(|r| r.to_string()).unwrap_or_default(),
            effective_retention: crate::ops::retention::effective(
                &space,
                &self.config.retention.per_plan(),
            )
            .to_string(),
        };
        let channels = match ask::<ChannelId>(&query.q, &query.channels_before)? {
            None => refused(),
            Some((p, page)) => {
                let found = self.storage.search_channels(id, p.as_deref(), page).await;
                paged(&found.map_err(internal)?, |c| c.id.to_string(), channel)
            }
        };
        let bots = match ask::<BotId>(&query.q, &query.bots_before)? {
            None => refused(),
            Some((p, page)) => {
                let found = self.storage.search_bots(id, p.as_deref(), page).await;
                paged(&found.map_err(internal)?, |b| b.id.to_string(), bot)
            }
        };
        let api_keys = match ask::<ApiKeyId>(&query.q, &query.keys_before)? {
            None => refused(),
            Some((p, page)) => {
                let found = self.storage.search_api_keys(id, p.as_deref(), page).await;
                paged(&found.map_err(internal)?, |k| k.id.to_string(), api_key)
            }
        };
        Ok(SpacePage {
            detail,
            channels,
            bots,
            api_keys,
        })
    }
}
