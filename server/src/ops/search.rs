//! The console's search box (issue 16 item 3): what a query is looked up as.
//!
//! One rule, [`classify`]: a query that is a delivery, event or destination ID (by its
//! prefix, `dlv_`, `evt_`, `dst_`, and a valid ULID after it) is looked up as that ID. The
//! `webhook-id` a receiver sees is the event's ID (`Delivery::webhook_id`), so it is an
//! event ID here too. Anything else is first an idempotency key (exactly as sent) and,
//! when no event has that key, a fragment of a destination's name, URL or description
//! ([`fragment_pattern`], case-insensitive).

use crate::domain::{DeliveryId, DestinationId, EventId};

/// The longest query taken (longer ones are cut): an idempotency key is at most 255
/// characters (docs §5), and a fragment longer than that matches nothing anyway.
pub const MAX_QUERY_CHARS: usize = 255;

/// A fragment needs at least this many characters: one letter would match every URL.
pub const MIN_FRAGMENT_CHARS: usize = 2;

/// The most hits of each kind a search shows.
pub const MAX_HITS: i64 = 20;

/// What a search query is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Delivery(DeliveryId),
    /// An event ID, or a `webhook-id` (the same thing): its deliveries.
    Event(EventId),
    Destination(DestinationId),
    /// An idempotency key or, failing that, a fragment of a destination's URL or
    /// description.
    Text(String),
}

/// What `query` is looked up as; `None` for an empty one. Surrounding spaces are
/// dropped, and so are quotes around a pasted value (`"evt_…"`).
pub fn classify(query: &str) -> Option<Lookup> {
    let q = query
        .trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '`')
        .trim();
    if q.is_empty() {
        return None;
    }
    let q: String = q.chars().take(MAX_QUERY_CHARS).collect();
    // IDs are lowercase; one pasted from somewhere that upper-cased it still counts.
    let lower = q.to_ascii_lowercase();
    if let Ok(id) = lower.parse::<DeliveryId>() {
        return Some(Lookup::Delivery(id));
    }
    if let Ok(id) = lower.parse::<EventId>() {
        return Some(Lookup::Event(id));
    }
    if let Ok(id) = lower.parse::<DestinationId>() {
        return Some(Lookup::Destination(id));
    }
    Some(Lookup::Text(q))
}

/// The `LIKE` pattern (with `\` as its escape) that finds `fragment` anywhere in a
/// lower-cased column, or `None` when the fragment is too short to mean anything.
pub fn fragment_pattern(fragment: &str) -> Option<String> {
    let f = fragment.trim().to_lowercase();
    if f.chars().count() < MIN_FRAGMENT_CHARS {
        return None;
    }
    let mut pattern = String::with_capacity(f.len() + 2);
    pattern.push('%');
    for c in f.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    Some(pattern)
}

/// What a destination field (the deliveries page's filter, a list's search) was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationPick {
    /// Nothing: every destination.
    Any,
    /// A destination ID (a suggestion chosen, a link followed).
    Id(DestinationId),
    /// The `LIKE` pattern of a part of a name, URL or description ([`fragment_pattern`]).
    Matching(String),
    /// Too short to search for.
    TooShort,
}

/// Reads a destination field: empty, an ID, or a part of a name, URL or description.
pub fn pick_destination(typed: &str) -> DestinationPick {
    let t = typed.trim();
    if t.is_empty() {
        return DestinationPick::Any;
    }
    if let Ok(id) = t.to_ascii_lowercase().parse::<DestinationId>() {
        return DestinationPick::Id(id);
    }
    match fragment_pattern(t) {
        Some(p) => DestinationPick::Matching(p),
        None => DestinationPick::TooShort,
    }
}

/// What a list's search field (spaces, users, incoming webhooks, event types, a space's
/// channels, bots and API keys) was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSearch {
    /// Nothing: every row.
    Any,
    /// The `LIKE` pattern of a part of a name, email or description ([`fragment_pattern`]).
    Matching(String),
    /// Too short to search for.
    TooShort,
}

/// Reads a list's search field: empty, or a part of what the list shows.
pub fn list_search(typed: &str) -> ListSearch {
    if typed.trim().is_empty() {
        return ListSearch::Any;
    }
    match fragment_pattern(typed) {
        Some(p) => ListSearch::Matching(p),
        None => ListSearch::TooShort,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_search_is_a_fragment_of_two_characters_or_more() {
        assert_eq!(list_search("   "), ListSearch::Any);
        assert_eq!(list_search("Ops"), ListSearch::Matching("%ops%".into()));
        assert_eq!(
            list_search("50%_"),
            ListSearch::Matching("%50\\%\\_%".into())
        );
        assert_eq!(list_search(" a "), ListSearch::TooShort);
    }

    #[test]
    fn a_destination_field_takes_an_id_or_a_part_of_a_url() {
        let id = DestinationId::new();
        assert_eq!(pick_destination("  "), DestinationPick::Any);
        assert_eq!(pick_destination(&id.to_string()), DestinationPick::Id(id));
        assert_eq!(
            pick_destination("Hooks.Example"),
            DestinationPick::Matching("%hooks.example%".into())
        );
        assert_eq!(pick_destination("x"), DestinationPick::TooShort);
    }

    #[test]
    fn an_id_is_looked_up_by_its_prefix() {
        let d = DeliveryId::new();
        let e = EventId::new();
        let t = DestinationId::new();
        assert_eq!(classify(&d.to_string()), Some(Lookup::Delivery(d)));
        assert_eq!(classify(&e.to_string()), Some(Lookup::Event(e)));
        assert_eq!(classify(&t.to_string()), Some(Lookup::Destination(t)));
        // Pasted with spaces, quotes or in capitals.
        assert_eq!(classify(&format!("  \"{d}\" ")), Some(Lookup::Delivery(d)));
        assert_eq!(
            classify(&e.to_string().to_uppercase()),
            Some(Lookup::Event(e))
        );
    }

    #[test]
    fn anything_else_is_a_key_or_a_fragment() {
        assert_eq!(classify(""), None);
        assert_eq!(classify("   "), None);
        assert_eq!(classify("order-42"), Some(Lookup::Text("order-42".into())));
        // A prefix without a valid ULID is not an ID: someone's key may look like one.
        assert_eq!(
            classify("dlv_not-an-id"),
            Some(Lookup::Text("dlv_not-an-id".into()))
        );
        // Keys keep their case (they are compared exactly).
        assert_eq!(classify("Order-42"), Some(Lookup::Text("Order-42".into())));
        let long = "k".repeat(300);
        assert_eq!(
            classify(&long),
            Some(Lookup::Text("k".repeat(MAX_QUERY_CHARS)))
        );
    }

    #[test]
    fn a_fragment_is_matched_anywhere_in_lower_case_with_wildcards_escaped() {
        assert_eq!(
            fragment_pattern("Example.COM"),
            Some("%example.com%".into())
        );
        assert_eq!(
            fragment_pattern("50%_off\\"),
            Some("%50\\%\\_off\\\\%".into())
        );
        assert_eq!(fragment_pattern("a"), None);
        assert_eq!(fragment_pattern(" a "), None);
        assert_eq!(fragment_pattern("ab"), Some("%ab%".into()));
    }
}
