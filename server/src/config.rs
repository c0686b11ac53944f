//! Settings: built-in defaults, then a TOML file (`PARTYFLOW_CONFIG`, default
//! `partyflow.toml` when present), then `PARTYFLOW_*` environment variables.
//! SPEC §8 names the stable variables.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// Address of the console, the REST API and incoming hooks.
    pub listen: SocketAddr,
    /// Comma-separated CIDRs destinations may reach despite SSRF protection.
    pub allow_networks: String,
    /// Folder holding the console's `pkg/` (wasm, JS, CSS).
    pub site_root: PathBuf,
    /// `pretty` for people, `json` for log collectors.
    pub log_format: LogFormat,
    /// Console sessions end after this long without activity.
    pub session_idle_minutes: i64,
    /// Largest request body accepted by the API and incoming hooks.
    pub max_body_bytes: usize,
    /// Mark session cookies `Secure` (set when serving over HTTPS).
    pub secure_cookies: bool,
    /// The dispatch engine (`[dispatch]`, or `PARTYFLOW_DISPATCH__…`).
    pub dispatch: DispatchConfig,
    /// Rate limits and auto-disable thresholds (`[limits]`, or `PARTYFLOW_LIMITS__…`).
    pub limits: LimitsConfig,
    /// Where tenants' programs run (`[sandbox]`, or `PARTYFLOW_SANDBOX__…`).
    pub sandbox: crate::sandbox::Settings,
}

/// One number per plan.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerPlan {
    pub free: i64,
    pub pro: i64,
    pub enterprise: i64,
}

impl PerPlan {
    pub fn for_plan(&self, plan: crate::domain::Plan) -> i64 {
        match plan {
            crate::domain::Plan::Free => self.free,
            crate::domain::Plan::Pro => self.pro,
            crate::domain::Plan::Enterprise => self.enterprise,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Messages per second per incoming webhook, by plan (SPEC §3).
    pub incoming_per_second: PerPlan,
    /// Outgoing sends per second shared by all destinations of a space, by plan (SPEC D4).
    pub outgoing_per_second: PerPlan,
    /// Bot messages per second per channel, all bots together (SPEC §4).
    pub bot_per_channel_per_second: i64,
    /// Failed requests in a row that disable an incoming webhook (SPEC §3).
    pub incoming_disable_after: i64,
    /// Attempts in flight to one destination at once, across all instances (SPEC §2.5).
    pub destination_in_flight: i64,
    /// Largest message text, in characters.
    pub message_max_chars: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            incoming_per_second: PerPlan {
                free: 5,
                pro: 10,
                enterprise: 30,
            },
            outgoing_per_second: PerPlan {
                free: 10,
                pro: 100,
                enterprise: 1000,
            },
            bot_per_channel_per_second: 10,
            incoming_disable_after: 100,
            destination_in_flight: 5,
            message_max_chars: 40_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    /// Run the engine in this process (off for API-only instances).
    pub enabled: bool,
    /// Attempts in flight at once in this process.
    pub concurrency: usize,
    /// On shutdown, how long in-flight attempts may finish before they are cut short.
    pub shutdown_grace_seconds: u64,
    /// Added to a destination's timeout to make the lease of a claimed delivery.
    pub lease_margin_seconds: u64,
    /// The longest idle sleep between looks at the queue.
    pub idle_poll_ms: u64,
    /// Dead-lettered deliveries in a row that disable a destination (SPEC §2.6).
    pub auto_disable_after: i64,
    /// Streak lengths at which admins get an early warning.
    pub auto_disable_warn_at: Vec<i64>,
    /// The share of this process's concurrency retries may use; the rest is kept
    /// for first attempts, so a storm of retries never starves fresh traffic.
    pub retry_share: f64,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            concurrency: 64,
            shutdown_grace_seconds: 10,
            lease_margin_seconds: 15,
            idle_poll_ms: 1000,
            auto_disable_after: 100,
            auto_disable_warn_at: vec![50, 90],
            retry_share: 0.8,
        }
    }
}

impl DispatchConfig {
    pub fn settings(&self, limits: &LimitsConfig) -> crate::dispatch::engine::Settings {
        crate::dispatch::engine::Settings {
            per_destination_in_flight: limits.destination_in_flight.max(1),
            plan_per_second: limits.outgoing_per_second,
            retry_share: self.retry_share.clamp(0.0, 1.0),
            concurrency: self.concurrency.max(1),
            lease_margin: std::time::Duration::from_secs(self.lease_margin_seconds),
            shutdown_grace: std::time::Duration::from_secs(self.shutdown_grace_seconds),
            idle_poll: std::time::Duration::from_millis(self.idle_poll_ms.max(10)),
            auto_disable: crate::domain::AutoDisable {
                after: self.auto_disable_after.max(1),
                warn_at: self.auto_disable_warn_at.clone(),
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: "sqlite://data/partyflow.db".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 3000)),
            allow_networks: String::new(),
            site_root: PathBuf::from("site"),
            log_format: LogFormat::Pretty,
            session_idle_minutes: 12 * 60,
            max_body_bytes: 1024 * 1024,
            secure_cookies: false,
            dispatch: DispatchConfig::default(),
            limits: LimitsConfig::default(),
            sandbox: crate::sandbox::Settings::default(),
        }
    }
}

impl Config {
    /// Reads the configuration from the file and the process environment.
    pub fn load() -> anyhow::Result<Self> {
        let file = std::env::var("PARTYFLOW_CONFIG").unwrap_or_else(|_| "partyflow.toml".into());
        Self::figment(&file)
            .extract()
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))
    }

    fn figment(file: &str) -> Figment {
        Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(file))
            // `PARTYFLOW_TEST_*` belong to the test suite, not to the server.
            .merge(
                Env::prefixed("PARTYFLOW_")
                    .ignore(&["config"])
                    .filter(|key| !key.starts_with("test_"))
                    .split("__"),
            )
    }
}

#[cfg(test)]
// figment's `Jail` closures return its own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_file_overrides_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "pf.toml",
                "listen = \"127.0.0.1:4000\"\nallow_networks = \"10.0.0.0/8\"",
            )?;
            jail.set_env("PARTYFLOW_ALLOW_NETWORKS", "127.0.0.0/8,::1/128");
            jail.set_env("PARTYFLOW_TEST_POSTGRES_URL", "postgres://ignored");
            let config: Config = Config::figment("pf.toml").extract()?;
            assert_eq!(config.listen.port(), 4000);
            assert_eq!(config.allow_networks, "127.0.0.0/8,::1/128");
            assert_eq!(config.database_url, "sqlite://data/partyflow.db");
            Ok(())
        });
    }

    #[test]
    fn an_unknown_setting_is_an_error_not_ignored() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("pf.toml", "lisen = \"127.0.0.1:4000\"")?;
            assert!(Config::figment("pf.toml").extract::<Config>().is_err());
            Ok(())
        });
    }
}
