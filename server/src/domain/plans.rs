//! The numbers a space's plan sets: one value per [`Plan`], with the product's defaults
//! (docs §3 incoming webhooks, docs D4 outgoing sends, docs D10 retention). The
//! configuration (`[limits]`, `[retention]`) overrides them and the dispatch engine and
//! the retention task read them; neither owns them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Plan, UnixMs};

/// One value per plan (a number by default; [`Retention`] for how long records are kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerPlan<T = i64> {
    pub free: T,
    pub pro: T,
    pub enterprise: T,
}

impl PerPlan {
    /// Messages per second per incoming webhook, by default (docs §3).
    pub const INCOMING_PER_SECOND: PerPlan = PerPlan {
        free: 5,
        pro: 10,
        enterprise: 30,
    };

    /// Outgoing sends per second shared by all destinations of a space, by default (docs D4).
    pub const OUTGOING_PER_SECOND: PerPlan = PerPlan {
        free: 10,
        pro: 100,
        enterprise: 1000,
    };
}

impl PerPlan<Retention> {
    /// How long finished deliveries, their attempts and events are kept, by default (docs D10).
    pub const RETENTION: PerPlan<Retention> = PerPlan {
        free: Retention::days(7),
        pro: Retention::days(30),
        enterprise: Retention::days(90),
    };
}

impl<T: Copy> PerPlan<T> {
    pub fn for_plan(&self, plan: Plan) -> T {
        match plan {
            Plan::Free => self.free,
            Plan::Pro => self.pro,
            Plan::Enterprise => self.enterprise,
        }
    }
}

/// How long a record is kept: a whole number of seconds from one second to ten years,
/// written as a duration such as `2s`, `10m`, `30d` or `1d 12h` (humantime's format) in
/// the configuration, the REST API and the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Retention(Duration);

impl Retention {
    /// The shortest retention: one second (the tests use seconds).
    pub const MIN: Retention = Retention(Duration::from_secs(1));
    /// The longest retention: ten years.
    pub const MAX: Retention = Retention::days(3650);
    /// One minute: how often the purge runs, by default.
    pub const MINUTE: Retention = Retention(Duration::from_secs(60));

    pub const fn days(days: u64) -> Self {
        Retention(Duration::from_secs(days * 24 * 3600))
    }

    pub fn as_duration(&self) -> Duration {
        self.0
    }

    pub fn as_millis(&self) -> i64 {
        self.0.as_millis() as i64
    }

    /// The time before which records of this age are purged.
    pub fn cutoff(&self, now: UnixMs) -> UnixMs {
        now.saturating_sub(self.as_millis())
    }
}

/// Why a duration is not a retention.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error("{0:?} is not a duration such as \"30d\", \"12h\", \"10m\" or \"2s\"")]
    Unreadable(String),
    #[error("{0:?} is not a whole number of seconds")]
    Fraction(String),
    #[error("{0:?} is outside 1s to 3650d")]
    OutOfRange(String),
}

impl std::str::FromStr for Retention {
    type Err = RetentionError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let text = raw.trim();
        let duration = humantime::parse_duration(text)
            .map_err(|_| RetentionError::Unreadable(raw.to_owned()))?;
        if duration.subsec_nanos() != 0 {
            return Err(RetentionError::Fraction(raw.to_owned()));
        }
        let retention = Retention(duration);
        if retention < Retention::MIN || retention > Retention::MAX {
            return Err(RetentionError::OutOfRange(raw.to_owned()));
        }
        Ok(retention)
    }
}

impl std::fmt::Display for Retention {
    /// humantime's form: `30days`, `1day 12h`, `2s`; read back by [`str::parse`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for Retention {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// The retention that applies to a space (docs D10): its own override when it has one,
/// else its plan's.
pub fn retention_for(
    space_override: Option<Retention>,
    plan: Plan,
    per_plan: &PerPlan<Retention>,
) -> Retention {
    space_override.unwrap_or_else(|| per_plan.for_plan(plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_plan_reads_its_own_number() {
        let limits = PerPlan::OUTGOING_PER_SECOND;
        assert_eq!(limits.for_plan(Plan::Free), 10);
        assert_eq!(limits.for_plan(Plan::Pro), 100);
        assert_eq!(limits.for_plan(Plan::Enterprise), 1000);
        assert_eq!(PerPlan::INCOMING_PER_SECOND.for_plan(Plan::Pro), 10);
    }

    #[test]
    fn a_space_override_wins_over_its_plan() {
        let plans = PerPlan::RETENTION;
        assert_eq!(retention_for(None, Plan::Free, &plans), Retention::days(7));
        assert_eq!(retention_for(None, Plan::Pro, &plans), Retention::days(30));
        assert_eq!(
            retention_for(None, Plan::Enterprise, &plans),
            Retention::days(90)
        );
        let own: Retention = "2s".parse().unwrap();
        assert_eq!(retention_for(Some(own), Plan::Enterprise, &plans), own);
    }

    #[test]
    fn retentions_are_durations_of_whole_seconds_in_range() {
        let ok = |s: &str| s.parse::<Retention>().unwrap().as_millis();
        assert_eq!(ok("2s"), 2_000);
        assert_eq!(ok("10m"), 600_000);
        assert_eq!(ok("30d"), 30 * 86_400_000);
        assert_eq!(ok(" 1d 12h "), 36 * 3_600_000);
        assert_eq!(ok("3650d"), 3650 * 86_400_000);
        for bad in ["", "30", "soon", "-1d", "0s", "1500ms", "3651d", "1.5s"] {
            assert!(bad.parse::<Retention>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_retention_reads_back_what_it_writes() {
        for raw in ["2s", "10m", "30d", "1d 12h", "365d"] {
            let r: Retention = raw.parse().unwrap();
            assert_eq!(r.to_string().parse::<Retention>().unwrap(), r, "{raw}");
        }
        assert_eq!(Retention::days(30).to_string(), "30days");
        assert_eq!(Retention::days(30).cutoff(31 * 86_400_000), 86_400_000);
    }
}
