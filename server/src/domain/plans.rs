//! The numbers a space's plan sets: one value per [`Plan`], with the product's defaults
//! (docs §3 incoming webhooks, docs D4 outgoing sends). The configuration
//! (`[limits]`) overrides them and the dispatch engine reads them; neither owns them.

use serde::{Deserialize, Serialize};

use super::Plan;

/// One number per plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerPlan {
    pub free: i64,
    pub pro: i64,
    pub enterprise: i64,
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

    pub fn for_plan(&self, plan: Plan) -> i64 {
        match plan {
            Plan::Free => self.free,
            Plan::Pro => self.pro,
            Plan::Enterprise => self.enterprise,
        }
    }
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
}
