//! Model providers: the `openai` (OpenAI-compatible chat completions) and `scripted`
//! providers behind one [`Provider`] trait, and `from_spec`, the one place an agent's
//! `ProviderSpec` becomes a provider.
//!
//! A [`Provider`] answers one model step: the conversation so far and the tools on
//! offer go in; the assistant's content, tool calls, finish reason and usage come out.
//! Token deltas, when the provider streams, go to a [`DeltaSink`] as they arrive: the
//! engine publishes them as ephemeral `message.delta` events and never stores them.
//! Dropping the future of [`Provider::complete`] aborts the call (that is how a cancel
//! interrupts a model call at once).

mod chat;
pub mod openai;
mod reasoning;
pub mod scripted;

pub use chat::{
    ChatMessage, ChatRole, Delta, DeltaSink, ModelError, ModelReply, ModelRequest, Provider,
    ToolSpec,
};
pub use openai::OpenAiProvider;
pub use scripted::ScriptedProvider;

use crate::outcome::StepError;
use crate::secrets;
use baton_core::TenantId;
use baton_core::model::ProviderSpec;
use baton_core::ports::SecretReader;
use baton_egress::TenantEgress;
use std::sync::Arc;

/// The provider an agent's spec names. An `openai` spec's API key secret, if it names
/// one, is revealed first: missing or unreadable, it fails the turn.
pub(crate) async fn from_spec(
    spec: &ProviderSpec,
    egress: &TenantEgress,
    secrets: &dyn SecretReader,
    tenant: TenantId,
) -> Result<Arc<dyn Provider>, StepError> {
    Ok(match spec {
        ProviderSpec::Scripted { replies } => Arc::new(ScriptedProvider::new(replies.clone())),
        ProviderSpec::Openai(spec) => {
            let key = match &spec.api_key_secret {
                None => None,
                Some(name) => {
                    let what = format!("the model's API key secret {name:?}");
                    Some(secrets::reveal(secrets, tenant, name, &what).await?)
                }
            };
            Arc::new(OpenAiProvider::new(egress.clone(), spec.clone(), key))
        }
    })
}
