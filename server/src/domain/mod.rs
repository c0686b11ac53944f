//! The domain: identifiers and the closed sets of values the product talks about
//! (plans, roles, statuses, error classes) and the numbers each plan sets (plans.rs).
//! Nothing here knows about HTTP or SQL.

pub mod ids;

pub use ids::*;

/// A string value outside a closed set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}; expected one of: {expected}")]
pub struct InvalidValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// Declares a closed string enum with `as_str`, `FromStr`, `Display` and serde in its wire form.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(InvalidValue {
                        what: $what,
                        value: s.to_owned(),
                        expected: concat!($($text, " "),+),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod model;
pub use model::*;
pub mod plans;
pub use plans::{retention_for, PerPlan, Retention};
pub mod audit;
pub use audit::{Actor, ActorKind, AuditAction, AuditEntry};

string_enum!(
    /// A space's plan; it sets the shared outgoing send rate and the incoming webhook rate.
    Plan, "plan" { Free = "free", Pro = "pro", Enterprise = "enterprise" }
);

string_enum!(
    /// A console user's role. `support` may read, resend and cancel; `admin` may do everything.
    Role, "role" { Admin = "admin", Support = "support" }
);

string_enum!(
    /// Where a delivery is in its life (docs §2.1).
    DeliveryStatus, "delivery status" {
        Pending = "pending",
        Sending = "sending",
        Retrying = "retrying",
        Succeeded = "succeeded",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

impl DeliveryStatus {
    /// Waiting for an attempt: the only statuses a worker may claim or a user may cancel.
    pub fn is_waiting(self) -> bool {
        matches!(self, DeliveryStatus::Pending | DeliveryStatus::Retrying)
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Succeeded | DeliveryStatus::Failed | DeliveryStatus::Cancelled
        )
    }
}

string_enum!(
    /// Why the last attempt of a delivery did not succeed (docs §2.2), plus the
    /// `rate_limited` marker, which is not a failure.
    ErrorClass, "error class" {
        Http = "http",
        Redirect = "redirect",
        Timeout = "timeout",
        Dns = "dns",
        Tls = "tls",
        Connect = "connect",
        Blocked = "blocked",
        Request = "request",
        Lost = "lost",
        Transformation = "transformation",
        Cancelled = "cancelled",
        RateLimited = "rate_limited",
    }
);

string_enum!(
    /// An outgoing destination's status; `inactive` after auto-disable or by hand.
    DestinationStatus, "destination status" { Active = "active", Inactive = "inactive" }
);

string_enum!(
    /// Whether a destination's deliveries go out in the events' publish order (docs D12):
    /// `fifo` sends one at a time, each only once every earlier event's delivery to it
    /// has finished; `none` (the default) sends them side by side, as they come due.
    DeliveryOrdering, "ordering" { Unordered = "none", Fifo = "fifo" }
);

impl DeliveryOrdering {
    /// How many attempts may be in flight to a destination with this ordering, given
    /// the engine's per-destination cap.
    pub fn in_flight_cap(self, per_destination: i64) -> i64 {
        match self {
            DeliveryOrdering::Unordered => per_destination,
            DeliveryOrdering::Fifo => per_destination.min(1),
        }
    }
}

string_enum!(
    /// An incoming webhook's status; `disabled` after 100 failed requests in a row.
    IncomingWebhookStatus, "incoming webhook status" { Active = "active", Disabled = "disabled" }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_destination_has_one_attempt_in_flight_at_most() {
        assert_eq!(DeliveryOrdering::Fifo.in_flight_cap(8), 1);
        assert_eq!(DeliveryOrdering::Fifo.in_flight_cap(0), 0);
        assert_eq!(DeliveryOrdering::Unordered.in_flight_cap(8), 8);
        assert_eq!(
            "fifo".parse::<DeliveryOrdering>().unwrap(),
            DeliveryOrdering::Fifo
        );
        assert_eq!(
            "none".parse::<DeliveryOrdering>().unwrap(),
            DeliveryOrdering::Unordered
        );
        assert!("lifo".parse::<DeliveryOrdering>().is_err());
    }

    #[test]
    fn every_error_class_round_trips_through_its_wire_name() {
        for class in ErrorClass::ALL {
            assert_eq!(class.as_str().parse::<ErrorClass>().unwrap(), *class);
            assert_eq!(
                serde_json::to_string(class).unwrap(),
                format!("\"{}\"", class.as_str())
            );
        }
        assert_eq!(ErrorClass::ALL.len(), 12);
    }

    #[test]
    fn an_unknown_plan_names_the_valid_ones() {
        let err = "gold".parse::<Plan>().unwrap_err();
        assert!(err.to_string().contains("free pro enterprise"));
    }
}
