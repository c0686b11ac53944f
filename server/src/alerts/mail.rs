//! The mailer: sends the alert e-mails of the outbox through the configured SMTP server
//! (lettre), deletes each one sent, and tries a failed one again later
//! ([`super::mail_retry_at`]) until it gives up and keeps the last error for the console.

use std::sync::Arc;
use std::time::Duration;

use lettre::message::{header::ContentType, Mailbox};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::config::AlertsConfig;
use crate::domain::AlertMail;
use crate::storage::Storage;

/// E-mails taken per round.
const BATCH: i64 = 50;
/// The longest one SMTP conversation may take.
const SMTP_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Mailer {
    storage: Arc<dyn Storage>,
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    poll: Duration,
}

impl Mailer {
    /// The mailer of `config`, or `None` when no SMTP server is configured. A URL or a
    /// sender lettre cannot read stops the start-up with a message (never the URL itself:
    /// it may hold a password).
    pub fn from_config(
        storage: Arc<dyn Storage>,
        config: &AlertsConfig,
    ) -> anyhow::Result<Option<Self>> {
        if config.smtp_url.trim().is_empty() {
            return Ok(None);
        }
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(config.smtp_url.trim())
            .map_err(|e| anyhow::anyhow!("PARTYFLOW_ALERTS__SMTP_URL is not an SMTP URL: {e}"))?
            .timeout(Some(SMTP_TIMEOUT))
            .build();
        let from = config.smtp_from.parse::<Mailbox>().map_err(|e| {
            anyhow::anyhow!("PARTYFLOW_ALERTS__SMTP_FROM {:?}: {e}", config.smtp_from)
        })?;
        Ok(Some(Self {
            storage,
            transport,
            from,
            poll: Duration::from_millis(config.poll_ms.max(10)),
        }))
    }

    /// Sends until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let more = match self.round().await {
                Ok(sent) => sent as i64 == BATCH,
                Err(e) => {
                    tracing::warn!(error = %e, "alerts: reading the e-mail outbox failed");
                    false
                }
            };
            if more {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round: every due e-mail tried once. Answers how many were due.
    pub async fn round(&self) -> anyhow::Result<usize> {
        let due = self.storage.due_alert_mails(now_ms(), BATCH).await?;
        for mail in &due {
            match self.send(mail).await {
                Ok(()) => self.storage.alert_mail_sent(mail.id).await?,
                Err(error) => {
                    let attempts = mail.attempts + 1;
                    let next = super::mail_retry_at(attempts, now_ms());
                    tracing::warn!(
                        mail.id = %mail.id,
                        attempts,
                        given_up = next.is_none(),
                        %error,
                        "alerts: an alert e-mail was not sent"
                    );
                    self.storage
                        .alert_mail_failed(mail.id, &error, next)
                        .await?;
                }
            }
        }
        Ok(due.len())
    }

    async fn send(&self, mail: &AlertMail) -> Result<(), String> {
        let to = mail
            .address
            .parse::<Mailbox>()
            .map_err(|e| format!("the address: {e}"))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(&mail.subject)
            .header(ContentType::TEXT_PLAIN)
            .body(mail.body.clone())
            .map_err(|e| format!("building the e-mail: {e}"))?;
        self.transport
            .send(message)
            .await
            .map(drop)
            .map_err(|e| format!("SMTP: {e}"))
    }
}
