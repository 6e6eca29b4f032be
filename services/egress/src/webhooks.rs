//! The webhook transport: deliveries POSTed through the one outbound client, under the
//! egress policy and the tenant's allowlist, with at most a short, masked excerpt of the
//! answer kept.

use crate::{Egress, Mask, describe};
use async_trait::async_trait;
use baton_core::egress::HostRule;
use baton_core::ports::{PostAnswer, WebhookTransport};
use std::time::Duration;

/// Characters of an answer's body kept in an attempt's record.
pub const EXCERPT_CHARS: usize = 200;
/// Bytes of an answer's body read, at most.
const READ_BYTES: usize = 4096;

#[async_trait]
impl WebhookTransport for Egress {
    async fn post(
        &self,
        hosts: Vec<HostRule>,
        url: &url::Url,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
        mask: &[String],
    ) -> Result<PostAnswer, String> {
        let request = self
            .for_tenant(hosts)
            .request(reqwest::Method::POST, url)
            .map_err(|denied| denied.to_string())?;
        let mut request = request
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::USER_AGENT, "Baton-Webhooks/1");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let mut answer = request
            .body(body)
            .send()
            .await
            .map_err(|e| describe(&e).to_string())?;
        let status = answer.status().as_u16();
        let mut bytes = Vec::new();
        // Only the start of the body matters; a receiver that streams forever is cut.
        while bytes.len() < READ_BYTES {
            match tokio::time::timeout(timeout, answer.chunk()).await {
                Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
                _ => break,
            }
        }
        Ok(PostAnswer {
            status,
            excerpt: excerpt(&bytes, mask),
        })
    }
}

/// The start of a body as text: masked, control characters replaced, at most
/// [`EXCERPT_CHARS`] characters.
fn excerpt(bytes: &[u8], mask: &[String]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let masked = Mask::new(mask.iter().cloned()).apply(&text);
    masked
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_is_short_masked_and_printable() {
        let body = format!("ok\n\u{1b}[31mwhsec_abc {}", "x".repeat(500));
        let e = excerpt(body.as_bytes(), &["whsec_abc".to_string()]);
        assert!(e.starts_with("ok  [31m*** x"), "{e}");
        assert_eq!(e.chars().count(), EXCERPT_CHARS);
        assert!(!e.contains("whsec_abc"));
    }
}
