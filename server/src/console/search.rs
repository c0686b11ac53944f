//! [`SearchPort`]: the console's search box. The query is read by the one rule,
//! `ops::search::classify`; this module looks it up and keeps only what lies in the
//! spaces the user may see ([`Backend::visible_spaces`]).

use std::collections::HashMap;

use app::error::ConsoleError;
use app::port::SearchPort;
use app::types::{SearchHit, SearchResults, SessionUser};

use super::{internal, require_role, Backend};
use crate::domain::*;
use crate::ops::search::{classify, fragment_pattern, Lookup, MAX_HITS};
use crate::storage::Page;

impl Backend {
    /// The spaces `actor` may see, by ID. Console users are install-wide (docs §6, roles):
    /// both roles see every space; a search, like every page, shows nothing outside these.
    pub(super) async fn visible_spaces(
        &self,
        actor: &SessionUser,
    ) -> Result<HashMap<SpaceId, Space>, ConsoleError> {
        require_role(actor, Role::Support)?;
        self.space_names().await
    }

    /// Each delivery as a hit, with its destination's URL (read once per destination).
    async fn delivery_hits(
        &self,
        deliveries: &[Delivery],
        spaces: &HashMap<SpaceId, Space>,
    ) -> Result<Vec<SearchHit>, ConsoleError> {
        let mut urls: HashMap<DestinationId, String> = HashMap::new();
        let mut hits = Vec::new();
        for d in deliveries {
            let Some(space) = spaces.get(&d.space_id) else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(slot) = urls.entry(d.destination_id) {
                let url = self
                    .storage
                    .get_destination(d.space_id, d.destination_id)
                    .await
                    .map(|x| x.url)
                    .unwrap_or_else(|_| "(deleted)".into());
                slot.insert(url);
            }
            hits.push(SearchHit {
                kind: "delivery".into(),
                id: d.id.to_string(),
                href: format!("/deliveries/{}", d.id),
                title: urls[&d.destination_id].clone(),
                detail: format!(
                    "{} · {} · event {}",
                    d.event_type,
                    d.status.as_str(),
                    d.event_id
                ),
                space_name: space.name.clone(),
                created_at: d.created_at,
            });
        }
        Ok(hits)
    }
}

fn destination_hit(d: &Destination, space: &Space) -> SearchHit {
    SearchHit {
        kind: "destination".into(),
        id: d.id.to_string(),
        href: format!("/destinations/{}", d.id),
        title: d.url.clone(),
        detail: d.description.clone(),
        space_name: space.name.clone(),
        created_at: d.created_at,
    }
}

#[async_trait::async_trait]
impl SearchPort for Backend {
    async fn search(
        &self,
        actor: &SessionUser,
        query: &str,
    ) -> Result<SearchResults, ConsoleError> {
        let spaces = self.visible_spaces(actor).await?;
        let mut out = SearchResults {
            query: query.trim().to_owned(),
            looked_up_as: String::new(),
            hits: Vec::new(),
            more: false,
            go: None,
        };
        let Some(lookup) = classify(query) else {
            return Ok(out);
        };
        let mut found = 0_usize;
        match lookup {
            Lookup::Delivery(id) => {
                out.looked_up_as = "a delivery ID".into();
                let d = match self.storage.get_delivery_by_id(id).await {
                    Ok(d) => vec![d],
                    Err(crate::storage::StorageError::NotFound) => Vec::new(),
                    Err(e) => return Err(internal(e)),
                };
                out.hits = self.delivery_hits(&d, &spaces).await?;
            }
            Lookup::Event(id) => {
                out.looked_up_as = "an event ID or webhook-id (its deliveries)".into();
                let d = self
                    .storage
                    .list_deliveries_of_events(&[id], MAX_HITS + 1)
                    .await
                    .map_err(internal)?;
                found = d.len();
                out.hits = self.delivery_hits(&d, &spaces).await?;
            }
            Lookup::Destination(id) => {
                out.looked_up_as = "a destination ID".into();
                match self.storage.get_destination_by_id(id).await {
                    Ok(d) => {
                        if let Some(space) = spaces.get(&d.space_id) {
                            out.hits.push(destination_hit(&d, space));
                        }
                    }
                    Err(crate::storage::StorageError::NotFound) => {}
                    Err(e) => return Err(internal(e)),
                }
            }
            Lookup::Text(text) => {
                let events = self
                    .storage
                    .find_events_by_idempotency_key(&text, MAX_HITS)
                    .await
                    .map_err(internal)?;
                if !events.is_empty() {
                    out.looked_up_as = "an idempotency key (its deliveries)".into();
                    let d = self
                        .storage
                        .list_deliveries_of_events(&events, MAX_HITS + 1)
                        .await
                        .map_err(internal)?;
                    found = d.len();
                    out.hits = self.delivery_hits(&d, &spaces).await?;
                } else {
                    out.looked_up_as = "a part of a destination's name, URL or description".into();
                    if let Some(pattern) = fragment_pattern(&text) {
                        let d = self
                            .storage
                            .search_destinations(None, Some(&pattern), Page::first(MAX_HITS + 1))
                            .await
                            .map_err(internal)?;
                        found = d.len();
                        out.hits = d
                            .iter()
                            .filter_map(|d| spaces.get(&d.space_id).map(|s| destination_hit(d, s)))
                            .collect();
                    }
                }
            }
        }
        out.more = found > MAX_HITS as usize;
        out.hits.truncate(MAX_HITS as usize);
        if let [only] = out.hits.as_slice() {
            out.go = Some(only.href.clone());
        }
        Ok(out)
    }
}
