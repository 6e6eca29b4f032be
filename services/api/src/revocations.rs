//! Ending the event streams of credentials that ended: a stream registers its caller's
//! [`Identity`] here and ends when a revocation, logout or removal from the tenant is
//! announced on the bus (from any replica, this one included), when the credentials
//! expire, or when its periodic re-check finds them no longer good (an announcement lost
//! on the bus).

use baton_core::TenantId;
use baton_core::auth::{Authenticator, Identity};
use baton_core::ports::{Control, EventBus};
use chrono::Utc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often an open stream reads its credentials again, for announcements that were lost.
pub const RECHECK: Duration = Duration::from_secs(30);

struct Watched {
    tenant: TenantId,
    identity: Identity,
    ended: CancellationToken,
}

/// The open streams of this replica by their callers; cheap to clone.
#[derive(Clone, Default)]
pub struct Revocations {
    watched: Arc<Mutex<HashMap<u64, Watched>>>,
    next: Arc<AtomicU64>,
}

/// A stream's registration: cancelled when its credentials end; forgotten when dropped.
pub struct Watch {
    watched: Arc<Mutex<HashMap<u64, Watched>>>,
    key: u64,
    ended: CancellationToken,
}

impl Revocations {
    /// Listens to the bus's control messages until `shutdown`, ending the streams each
    /// announcement names. Returns once subscribed, so nothing announced after is missed.
    pub async fn listen(
        &self,
        bus: &dyn EventBus,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<(), baton_core::StoreError> {
        let mut control = bus.subscribe_control().await?;
        let this = self.clone();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    msg = control.recv() => match msg {
                        Some(msg) => this.end(&msg.control),
                        None => return,
                    },
                    () = shutdown.cancelled() => return,
                }
            }
        });
        Ok(())
    }

    /// Registers a stream of `identity` in `tenant`.
    pub fn watch(&self, identity: &Identity, tenant: TenantId) -> Watch {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = CancellationToken::new();
        lock(&self.watched).insert(
            key,
            Watched {
                tenant,
                identity: identity.clone(),
                ended: ended.clone(),
            },
        );
        Watch {
            watched: self.watched.clone(),
            key,
            ended,
        }
    }

    /// Ends every stream `control` names.
    pub fn end(&self, control: &Control) {
        for w in lock(&self.watched).values() {
            if w.identity.ended_by(w.tenant, control) {
                w.ended.cancel();
            }
        }
    }

    /// Streams registered now.
    pub fn len(&self) -> usize {
        lock(&self.watched).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Watch {
    /// Resolves when the stream must end: its credentials were revoked or left the tenant
    /// (announced), they expired, or a re-check every [`RECHECK`] finds them no longer
    /// good.
    pub async fn ended(
        &self,
        auth: Authenticator,
        identity: Identity,
        token_hash: Option<Vec<u8>>,
        tenant: TenantId,
    ) {
        let expiry = async {
            match identity.expires_at() {
                Some(at) => {
                    let left = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                    tokio::time::sleep(left).await;
                }
                None => std::future::pending().await,
            }
        };
        let rechecks = async {
            loop {
                tokio::time::sleep(RECHECK).await;
                match auth.recheck(&identity, token_hash.as_deref(), tenant).await {
                    Ok(()) => {}
                    Err(baton_core::auth::AuthError::Core(e)) => {
                        // The database is away: the stream goes on, the next re-check
                        // decides.
                        tracing::debug!(error = %e, "re-checking a stream's credentials failed");
                    }
                    Err(_) => return,
                }
            }
        };
        tokio::select! {
            () = self.ended.cancelled() => {}
            () = expiry => {}
            () = rechecks => {}
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        lock(&self.watched).remove(&self.key);
    }
}

fn lock(watched: &Mutex<HashMap<u64, Watched>>) -> MutexGuard<'_, HashMap<u64, Watched>> {
    // The map stays whole whatever panicked while holding the lock.
    watched.lock().unwrap_or_else(|e| e.into_inner())
}
