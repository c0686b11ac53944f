//! Settings: built-in defaults, then a TOML file (`PARTYFLOW_CONFIG`, default
//! `partyflow.toml` when present), then `PARTYFLOW_*` environment variables.
//! docs §8 names the stable variables.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::domain::{PerPlan, Retention};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// Address of the console, the REST API and incoming hooks.
    pub listen: SocketAddr,
    /// Comma-separated CIDRs destinations may reach despite SSRF protection.
    pub allow_networks: String,
    /// The base of every URL the product shows or sends (`https://hooks.example.com`);
    /// empty means `http://{listen}`. Checked at start-up ([`PublicUrl::parse`]).
    pub public_url: String,
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
    /// Alerts by e-mail and how often alerts are looked for (`[alerts]`, or
    /// `PARTYFLOW_ALERTS__…`).
    pub alerts: AlertsConfig,
    /// How long records are kept and how often they are purged (`[retention]`, or
    /// `PARTYFLOW_RETENTION__…`; docs D10).
    pub retention: RetentionConfig,
    /// Where Prometheus scrapes `GET /metrics` (`PARTYFLOW_METRICS_LISTEN`); its own
    /// address, never the public one; empty turns the metrics listener off.
    pub metrics_listen: String,
    /// The demo space's sample traffic and receiver (`[demo]`, or `PARTYFLOW_DEMO__…`;
    /// docs D17).
    pub demo: DemoConfig,
    /// Threads of the async runtime (`PARTYFLOW_WORKER_THREADS`); 0, the default, leaves
    /// one core to the database's threads ([`runtime_workers`]).
    pub worker_threads: usize,
    /// Schedule the server's threads as batch work (`PARTYFLOW_BATCH_SCHEDULING`; on by
    /// default, Linux only): a thread woken does not preempt the one running
    /// ([`schedule_as_batch`]).
    pub batch_scheduling: bool,
}

/// The async runtime's worker threads for `cores` cores when `configured` is 0: one core
/// is left to the threads outside the runtime that every request waits on — SQLite's
/// connections (its writer runs every write transaction) or a local PostgreSQL. On two
/// cores a second worker mostly stole tasks from the first and woke it for them (docs §7
/// "A core for the database", with the measurements).
pub fn runtime_workers(configured: usize, cores: usize) -> usize {
    match configured {
        0 => cores.saturating_sub(1).max(1),
        n => n,
    }
}

impl Config {
    /// The async runtime for this configuration ([`runtime_workers`]); its threads, and
    /// every thread they start (SQLite's connections, the sandbox's workers), scheduled as
    /// batch work unless `batch_scheduling` is off ([`schedule_as_batch`]).
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(runtime_workers(self.worker_threads, cores))
            .enable_all();
        if self.batch_scheduling {
            builder.on_thread_start(schedule_as_batch);
        }
        builder.build()
    }
}

/// Schedules the calling thread as batch work (Linux's `SCHED_BATCH`, its nice value kept);
/// the threads and processes it starts inherit it. Batch threads get the same share of the
/// CPU, but one woken does not preempt the thread running: a thread that hands work to
/// another (SQLite's connection thread its results, the runtime a command or a sync) goes
/// on until it waits, instead of losing the core at each hand-off. On two cores that cut
/// the context switches of a delivery at 200 events/s by seven in eight (docs §7 "Batch
/// scheduling", with the measurements).
/// Where the system refuses, the thread stays as it was, with a warning (once).
pub fn schedule_as_batch() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadPriority, ThreadSchedulePolicy,
        };
        // Setting the policy also sets the thread's nice value (to 0): put it back.
        let nice = rustix::process::getpriority_process(None).unwrap_or(0);
        let batch = set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Os(Default::default()),
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch),
        );
        let kept = rustix::process::setpriority_process(None, nice);
        if let Some(e) = batch
            .err()
            .map(|e| format!("{e:?}"))
            .or(kept.err().map(|e| e.to_string()))
        {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(error = %e, "the threads could not be scheduled as batch work; they run as they were");
            });
        }
    }
}

/// The demo space (docs D17): how its sample traffic flows; shrunk by the tests.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Between two rounds of sample events (four events a round), in milliseconds.
    pub traffic_ms: u64,
    /// How long a new demo space's sample traffic flows, in seconds.
    pub duration_secs: u64,
    /// How long the demo's slow receiver takes to answer, in milliseconds.
    pub slow_ms: u64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        let d = crate::demo::Settings::default();
        Self {
            traffic_ms: d.traffic_ms,
            duration_secs: (d.duration_ms / 1000) as u64,
            slow_ms: d.slow_ms,
        }
    }
}

impl DemoConfig {
    /// The demo's settings.
    pub fn settings(&self) -> crate::demo::Settings {
        crate::demo::Settings {
            traffic_ms: self.traffic_ms,
            duration_ms: i64::try_from(self.duration_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
            slow_ms: self.slow_ms,
        }
    }
}

/// Alerts (docs D16): the SMTP server that e-mails them, and the relay's pace.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// `smtp://user:password@host:587?tls=required` or `smtps://…` (lettre's URL form);
    /// empty: alerts are not e-mailed. Never logged: it may hold a password.
    pub smtp_url: String,
    /// The sender of alert e-mails.
    pub smtp_from: String,
    /// How often the relay looks for new notifications and due e-mails, in milliseconds.
    pub poll_ms: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            smtp_url: String::new(),
            smtp_from: "PartyFlow Hooks <partyflow@localhost>".into(),
            poll_ms: 1000,
        }
    }
}

impl std::fmt::Debug for AlertsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertsConfig")
            .field(
                "smtp_url",
                &if self.smtp_url.is_empty() {
                    ""
                } else {
                    "(set)"
                },
            )
            .field("smtp_from", &self.smtp_from)
            .field("poll_ms", &self.poll_ms)
            .finish()
    }
}

/// `[retention]`: durations such as `2s`, `10m`, `30d` (a value that does not read as
/// one stops the start with the key named).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Finished deliveries, their attempts and events, and read notifications of a space
    /// on the free plan are kept this long (unless the space has its own retention).
    pub free: Retention,
    pub pro: Retention,
    pub enterprise: Retention,
    /// How often the purge runs.
    pub interval: Retention,
    /// How long audit entries are kept.
    pub audit: Retention,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let plans = PerPlan::RETENTION;
        Self {
            free: plans.free,
            pro: plans.pro,
            enterprise: plans.enterprise,
            interval: Retention::MINUTE,
            audit: Retention::days(365),
        }
    }
}

impl RetentionConfig {
    /// The retention task's settings.
    pub fn settings(&self) -> crate::retention::Settings {
        crate::retention::Settings {
            per_plan: self.per_plan(),
            interval: self.interval.as_duration(),
            batch: 1000,
            batch_time: std::time::Duration::from_millis(5),
            busy_batch_time: std::time::Duration::from_millis(1),
            pause: std::time::Duration::from_millis(2),
            vacuum_pages: 4096,
            audit: self.audit,
        }
    }

    /// The plans' retentions.
    pub fn per_plan(&self) -> PerPlan<Retention> {
        PerPlan {
            free: self.free,
            pro: self.pro,
            enterprise: self.enterprise,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Messages per second per incoming webhook, by plan (docs §3).
    pub incoming_per_second: PerPlan,
    /// Outgoing sends per second shared by all destinations of a space, by plan (docs D4).
    pub outgoing_per_second: PerPlan,
    /// Bot messages per second per channel, all bots together (docs §4).
    pub bot_per_channel_per_second: i64,
    /// Failed requests in a row that disable an incoming webhook (docs §3).
    pub incoming_disable_after: i64,
    /// Attempts in flight to one destination at once, across all instances (docs §2.5).
    pub destination_in_flight: i64,
    /// Largest message text, in characters.
    pub message_max_chars: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            incoming_per_second: PerPlan::INCOMING_PER_SECOND,
            outgoing_per_second: PerPlan::OUTGOING_PER_SECOND,
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
    /// Dead-lettered deliveries in a row that disable a destination (docs §2.6).
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
            public_url: String::new(),
            site_root: PathBuf::from("site"),
            log_format: LogFormat::Pretty,
            session_idle_minutes: 12 * 60,
            max_body_bytes: 1024 * 1024,
            secure_cookies: false,
            dispatch: DispatchConfig::default(),
            limits: LimitsConfig::default(),
            sandbox: crate::sandbox::Settings::default(),
            alerts: AlertsConfig::default(),
            retention: RetentionConfig::default(),
            metrics_listen: "127.0.0.1:9464".into(),
            demo: DemoConfig::default(),
            worker_threads: 0,
            batch_scheduling: true,
        }
    }
}

/// The base of every URL the product shows or sends (docs D13): incoming-webhook URLs
/// in the REST API and the console, links in notifications. Built from
/// `PARTYFLOW_PUBLIC_URL`, never from a request's `Host` header: whoever sends a request
/// must not choose the URL an admin copies to a sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// An absolute `http`/`https` URL with a host, without credentials, query or
    /// fragment; a trailing `/` is dropped (a path prefix such as `/partyflow` is kept,
    /// for a reverse proxy that serves the product below it).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let url =
            url::Url::parse(raw).map_err(|e| format!("{raw:?} is not an absolute URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{raw:?} must start with http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("{raw:?} has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("{raw:?} must not carry a user name or password"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "{raw:?} must not have a query (?…) or a fragment (#…)"
            ));
        }
        Ok(Self(url.as_str().trim_end_matches('/').to_owned()))
    }

    /// `http://{addr}`: the default, the address the server listens on.
    pub fn for_listener(addr: SocketAddr) -> Self {
        Self(format!("http://{addr}"))
    }

    /// The base followed by `path` (which starts with `/`): the one way URLs are made.
    pub fn join(&self, path: &str) -> String {
        debug_assert!(path.starts_with('/'), "{path:?} is not an absolute path");
        format!("{}{path}", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Config {
    /// `public_url` checked, or `http://{listening}` when it is empty; `listening` is the
    /// address actually bound (so `listen = "127.0.0.1:0"` gives the real port).
    pub fn resolve_public_url(&self, listening: SocketAddr) -> anyhow::Result<PublicUrl> {
        if self.public_url.trim().is_empty() {
            return Ok(PublicUrl::for_listener(listening));
        }
        PublicUrl::parse(&self.public_url).map_err(|e| anyhow::anyhow!("PARTYFLOW_PUBLIC_URL: {e}"))
    }

    /// The metrics listener's address; `None` when `metrics_listen` is empty (off).
    pub fn metrics_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        let raw = self.metrics_listen.trim();
        if raw.is_empty() {
            return Ok(None);
        }
        raw.parse().map(Some).map_err(|e| {
            anyhow::anyhow!(
                "PARTYFLOW_METRICS_LISTEN: {raw:?} is not an address such as 127.0.0.1:9464 ({e})"
            )
        })
    }

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
            // `PARTYFLOW_TEST_*` belong to the test suite, not to the server, and
            // `PARTYFLOW_DEMO` (`=0` skips the demo space) to `./dev run`.
            .merge(
                Env::prefixed("PARTYFLOW_")
                    .ignore(&["config", "demo"])
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
    fn the_demo_timings_come_from_demo_and_partyflow_demo_is_the_dev_scripts() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("pf.toml", "[demo]\nduration_secs = 30")?;
            jail.set_env("PARTYFLOW_DEMO", "0");
            jail.set_env("PARTYFLOW_DEMO__TRAFFIC_MS", "50");
            let config: Config = Config::figment("pf.toml").extract()?;
            let demo = config.demo.settings();
            assert_eq!(
                (demo.traffic_ms, demo.duration_ms, demo.slow_ms),
                (50, 30_000, 300)
            );
            Ok(())
        });
    }

    #[test]
    fn a_public_url_is_an_absolute_http_url_kept_without_its_trailing_slash() {
        let ok = |raw: &str| PublicUrl::parse(raw).unwrap().as_str().to_owned();
        assert_eq!(ok("https://hooks.example.com"), "https://hooks.example.com");
        assert_eq!(
            ok("https://hooks.example.com/"),
            "https://hooks.example.com"
        );
        assert_eq!(
            ok(" HTTPS://Hooks.Example.com:8443/ "),
            "https://hooks.example.com:8443"
        );
        assert_eq!(ok("http://[::1]:3000"), "http://[::1]:3000");
        assert_eq!(
            ok("https://example.com/partyflow/"),
            "https://example.com/partyflow"
        );
        for bad in [
            "hooks.example.com",
            "/hooks",
            "ftp://hooks.example.com",
            "https://hooks.example.com/?a=1",
            "https://hooks.example.com/#top",
            "https://user:pw@hooks.example.com",
            "",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn urls_are_the_public_base_and_a_path() {
        let base = PublicUrl::parse("https://hooks.example.com/").unwrap();
        assert_eq!(
            base.join("/hooks/iwh_1/pfh_2"),
            "https://hooks.example.com/hooks/iwh_1/pfh_2"
        );
        let prefixed = PublicUrl::parse("https://example.com/pf").unwrap();
        assert_eq!(prefixed.join("/hooks/x"), "https://example.com/pf/hooks/x");
    }

    #[test]
    fn without_a_public_url_the_base_is_the_address_the_server_listens_on() {
        let config = Config::default();
        let bound: SocketAddr = "127.0.0.1:41234".parse().unwrap();
        assert_eq!(
            config.resolve_public_url(bound).unwrap().as_str(),
            "http://127.0.0.1:41234"
        );
        let set = Config {
            public_url: "https://hooks.example.com/".into(),
            ..Config::default()
        };
        assert_eq!(
            set.resolve_public_url(bound).unwrap().as_str(),
            "https://hooks.example.com"
        );
        let bad = Config {
            public_url: "hooks.example.com".into(),
            ..Config::default()
        };
        let err = bad.resolve_public_url(bound).unwrap_err().to_string();
        assert!(err.starts_with("PARTYFLOW_PUBLIC_URL: "), "{err}");
    }

    #[test]
    fn retention_reads_durations_from_the_file_and_the_environment() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("pf.toml", "[retention]\nfree = \"2s\"\ninterval = \"10m\"")?;
            jail.set_env("PARTYFLOW_RETENTION__PRO", "30d");
            let config: Config = Config::figment("pf.toml").extract()?;
            assert_eq!(config.retention.free.as_millis(), 2_000);
            assert_eq!(config.retention.interval.as_millis(), 600_000);
            assert_eq!(config.retention.pro, Retention::days(30));
            assert_eq!(config.retention.enterprise, Retention::days(90));
            assert_eq!(config.retention.audit, Retention::days(365));
            Ok(())
        });
    }

    #[test]
    fn a_bad_retention_stops_the_start_naming_its_key() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("PARTYFLOW_RETENTION__PRO", "thirty days");
            let err = Config::figment("none.toml")
                .extract::<Config>()
                .unwrap_err()
                .to_string();
            // The key, as the environment spells it: `RETENTION.PRO`.
            assert!(err.to_lowercase().contains("retention.pro"), "{err}");
            assert!(err.contains("thirty days"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_metrics_listener_is_on_by_default_and_off_when_empty() {
        assert_eq!(
            Config::default().metrics_addr().unwrap(),
            Some("127.0.0.1:9464".parse().unwrap())
        );
        let off = Config {
            metrics_listen: " ".into(),
            ..Config::default()
        };
        assert_eq!(off.metrics_addr().unwrap(), None);
        let bad = Config {
            metrics_listen: "localhost".into(),
            ..Config::default()
        };
        let err = bad.metrics_addr().unwrap_err().to_string();
        assert!(err.starts_with("PARTYFLOW_METRICS_LISTEN: "), "{err}");
        figment::Jail::expect_with(|jail| {
            jail.set_env("PARTYFLOW_METRICS_LISTEN", "");
            let config: Config = Config::figment("none.toml").extract()?;
            assert_eq!(config.metrics_addr().unwrap(), None);
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

    #[test]
    fn the_runtime_leaves_a_core_to_the_database_unless_told_otherwise() {
        assert_eq!(runtime_workers(0, 1), 1, "never none");
        assert_eq!(runtime_workers(0, 2), 1);
        assert_eq!(runtime_workers(0, 8), 7);
        assert_eq!(runtime_workers(3, 2), 3, "a configured count is kept");
        figment::Jail::expect_with(|jail| {
            jail.set_env("PARTYFLOW_WORKER_THREADS", "4");
            let config: Config = Config::figment("none.toml").extract()?;
            assert_eq!(config.worker_threads, 4);
            Ok(())
        });
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_runtimes_threads_and_the_threads_they_start_are_batch_work_unless_told_otherwise() {
        use thread_priority::{
            thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        let batch = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
        // As this test's process was started (normally not batch work).
        let own = thread_schedule_policy().unwrap();
        let nice = rustix::process::getpriority_process(None).unwrap();
        // In the runtime's thread and in a thread it starts (as sqlx starts SQLite's).
        let seen = |config: &Config| {
            config.runtime().unwrap().block_on(async {
                tokio::spawn(async {
                    let started = std::thread::spawn(|| {
                        (
                            thread_schedule_policy().unwrap(),
                            rustix::process::getpriority_process(None).unwrap(),
                        )
                    });
                    (
                        (
                            thread_schedule_policy().unwrap(),
                            rustix::process::getpriority_process(None).unwrap(),
                        ),
                        started.join().unwrap(),
                    )
                })
                .await
                .unwrap()
            })
        };
        let (worker, started) = seen(&Config::default());
        assert_eq!(worker, (batch, nice), "batch, the nice value kept");
        assert_eq!(started, (batch, nice), "inherited");
        let (worker, _) = seen(&Config {
            batch_scheduling: false,
            ..Config::default()
        });
        assert_eq!(worker.0, own, "as the process was started");
        assert_eq!(
            thread_schedule_policy().unwrap(),
            own,
            "the caller's own thread is left alone"
        );
        figment::Jail::expect_with(|jail| {
            jail.set_env("PARTYFLOW_BATCH_SCHEDULING", "false");
            let config: Config = Config::figment("none.toml").extract()?;
            assert!(!config.batch_scheduling);
            Ok(())
        });
    }
}
