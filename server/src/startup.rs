//! Wires the server together: storage, sessions, the engine, the [`AppState`] of
//! every handler, the router (API + console), serving, and graceful shutdown on
//! SIGTERM/SIGINT. Nothing else lives here.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use crate::config::Config;
use crate::console::{self, sessions::AnyStore};
use crate::http::{self, AppState};
use crate::storage;

/// Connects, migrates and serves until SIGTERM or SIGINT.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    // A wrong public URL stops the start before anything else happens.
    config.resolve_public_url(config.listen)?;
    // One process serves a SQLite database: a second one stops here.
    let _alone = storage::sqlite::serve_alone(&config.database_url)?;
    let db = storage::connect(&config.database_url).await?;
    db.storage.migrate().await.context("applying migrations")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let metrics = bind_metrics(&config).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            shutdown.cancel();
        }
    });
    run_with_metrics(config, db, listener, metrics, shutdown).await
}

/// The metrics listener of `config.metrics_listen`, bound; `None` when it is off.
pub async fn bind_metrics(config: &Config) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = config.metrics_addr()? else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening for metrics on {addr} (PARTYFLOW_METRICS_LISTEN)"))?;
    Ok(Some(listener))
}

/// Serves on `listener` until `shutdown` is cancelled, then finishes in-flight requests;
/// the metrics listener is bound from `config.metrics_listen`.
pub async fn run(
    config: Config,
    db: storage::Connected,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = bind_metrics(&config).await?;
    run_with_metrics(config, db, listener, metrics, shutdown).await
}

/// [`run`] with the metrics listener already bound (`None`: no metrics listener).
pub async fn run_with_metrics(
    config: Config,
    db: storage::Connected,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    // The recorder first, so the engine's handles (made with it) record.
    let metrics_handle = metrics.as_ref().map(|_| crate::metrics::install());
    let public_url = config.resolve_public_url(addr)?;
    let storage = db.storage;
    let sessions = AnyStore::new(db.sessions, storage.clone())
        .await
        .context("creating the session store")?;
    let cleanup = tokio::spawn(
        sessions
            .clone()
            .delete_expired_every(Duration::from_secs(300)),
    );
    let retention = tokio::spawn(crate::retention::run(
        storage.clone(),
        sessions.clone(),
        config.retention.settings(),
        shutdown.clone(),
    ));

    let network = crate::dispatch::ssrf::NetworkPolicy::parse(&config.allow_networks)
        .map_err(|e| anyhow::anyhow!("PARTYFLOW_ALLOW_NETWORKS: {e}"))?
        // The demo receiver on our own listener, and nothing else there (docs D17).
        .with_exact_urls(crate::demo::receiver_urls(&crate::demo::receiver_base(
            addr,
        )))
        .map_err(|e| anyhow::anyhow!("the demo receiver: {e}"))?;
    let sandbox = crate::sandbox::Sandbox::start(config.sandbox.clone())?;
    let engine = Arc::new(crate::dispatch::engine::Engine::new(
        storage.clone(),
        network,
        sandbox.clone(),
        config.dispatch.settings(&config.limits),
    )?);
    let engine_task = config
        .dispatch
        .enabled
        .then(|| tokio::spawn(engine.clone().run(shutdown.clone())));

    // Alerts (docs D16): every admin notification also goes out, to alert webhooks
    // through the engine and by e-mail when an SMTP server is configured.
    let relay = crate::alerts::relay::Relay {
        storage: storage.clone(),
        engine: engine.handle(),
        sandbox: sandbox.clone(),
        public_url: public_url.clone(),
        poll: Duration::from_millis(config.alerts.poll_ms.max(10)),
    };
    let mut alert_tasks = vec![tokio::spawn(relay.run(shutdown.clone()))];
    if let Some(mailer) = crate::alerts::mail::Mailer::from_config(storage.clone(), &config.alerts)?
    {
        alert_tasks.push(tokio::spawn(mailer.run(shutdown.clone())));
    }
    let demo_task = tokio::spawn(crate::demo::run_traffic(
        storage.clone(),
        engine.handle(),
        config.demo.settings(),
        shutdown.clone(),
    ));
    let metrics_task = match (metrics, metrics_handle) {
        (Some(listener), Some(handle)) => {
            tracing::info!(addr = %listener.local_addr()?, "serving metrics on /metrics");
            Some(tokio::spawn(crate::http::metrics::serve(
                listener,
                handle,
                storage.clone(),
                shutdown.clone(),
            )))
        }
        _ => None,
    };

    let shared_config = Arc::new(config.clone());
    let schemas = crate::ops::event_types::SchemaCache::default();
    let state = AppState {
        console: Arc::new(console::Backend::new(
            storage.clone(),
            engine.handle(),
            shared_config.clone(),
            public_url.clone(),
            sessions.clone(),
            sandbox.clone(),
            schemas.clone(),
        )),
        sandbox,
        engine: engine.handle(),
        publisher: crate::storage::group_commit::Publisher::start(storage.clone()),
        storage,
        leptos_options: leptos_options(&config, addr),
        config: shared_config,
        public_url: public_url.clone(),
        schemas,
        key_use: crate::ops::audit::KeyUse::default(),
    };
    let session_layer = SessionManagerLayer::new(sessions)
        .with_name("partyflow_session")
        .with_same_site(SameSite::Strict)
        .with_http_only(true)
        .with_secure(config.secure_cookies)
        .with_expiry(Expiry::OnInactivity(time::Duration::minutes(
            config.session_idle_minutes,
        )));

    // Outermost first: the request span, then the request ID (recorded in the span; its
    // answer header and the logging of failures cover everything inside), then sessions.
    let app = router(state)
        .layer(session_layer)
        .layer(axum::middleware::from_fn(http::request_id::assign))
        .layer(TraceLayer::new_for_http().make_span_with(request_span));

    tracing::info!(%addr, console = %public_url.join("/"), "PartyFlow Hooks is serving");
    // With the peer address: console sign-in throttling counts per source (`console::throttle`).
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .context("serving HTTP")?;
    if let Some(task) = engine_task {
        let _ = task.await;
    }
    for task in alert_tasks {
        let _ = task.await;
    }
    let _ = demo_task.await;
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    cleanup.abort();
    let _ = retention.await;
    tracing::info!("stopped");
    Ok(())
}

/// The request span, with incoming-hook tokens cut out of the path: secrets never reach the logs.
fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let path = req.uri().path();
    let shown = match path.strip_prefix("/hooks/") {
        Some(rest) => format!("/hooks/{}/…", rest.split('/').next().unwrap_or("")),
        None => path.to_owned(),
    };
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %shown,
        request_id = tracing::field::Empty
    )
}

fn leptos_options(config: &Config, addr: std::net::SocketAddr) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name(crate::assets::bundle_name(&config.site_root))
        .site_root(config.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build()
}

fn router(state: AppState) -> Router {
    let routes = generate_route_list(app::App);
    let console_backend = state.console.clone();
    let console = Router::new()
        .leptos_routes_with_context(
            &state,
            routes,
            move || provide_context(console_backend.clone()),
            {
                let options = state.leptos_options.clone();
                move || app::shell(options.clone())
            },
        )
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            console::require_login,
        ))
        .layer(axum::middleware::from_fn(crate::assets::html_no_cache))
        // A refused plain form post keeps what was typed (docs §6 "Forms keep what was typed").
        .layer(axum::middleware::from_fn(app::guard::keep_typed));

    let max_body = state.config.max_body_bytes;
    let demo = crate::demo::router(state.config.demo.settings());
    Router::new()
        .merge(http::router(max_body))
        .merge(demo)
        .merge(console)
        .merge(crate::assets::router(&state.config.site_root))
        // Every request by route template (docs §8 "Metrics"); `MatchedPath` is known here.
        .layer(axum::middleware::from_fn(http::metrics::track))
        .with_state(state)
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
