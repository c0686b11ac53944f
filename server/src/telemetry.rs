//! Structured logs through `tracing`; `RUST_LOG` filters, the config picks the format.

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_sessions=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Pretty => registry
            .with(fmt::layer().compact().with_writer(std::io::stderr))
            .try_init(),
    };
}
