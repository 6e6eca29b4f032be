//! Following a run's events live: subscribe first, replay from the database after the
//! client's cursor, then forward live events in version order. Duplicates (already sent)
//! are dropped; a gap (a lost or reordered publish) is filled by re-reading the database,
//! and so is silence longer than the resync interval, so a lost publish costs latency,
//! never an event. The stream ends after a terminal event, or when the bus closes the
//! subscription because the subscriber fell behind (the client resumes from its cursor).

use super::Runs;
use crate::auth::{Action, Principal};
use crate::error::CoreError;
use crate::ports::{RunStore, Subscription};
use baton_events::{Envelope, RunId, TenantId};
use futures::Stream;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

const REPLAY_PAGE: u32 = 500;

struct Follower {
    store: Arc<dyn RunStore>,
    tenant: TenantId,
    run: RunId,
    /// Version of the last event handed out.
    cursor: i64,
    pending: VecDeque<Envelope>,
    sub: Subscription,
    resync: Duration,
    done: bool,
}

/// A stream of the run's events with `version > after`, live until the run ends.
pub async fn follow(
    runs: &Runs,
    p: &Principal,
    run: RunId,
    after: i64,
    resync: Duration,
) -> Result<impl Stream<Item = Result<Envelope, CoreError>> + Send + 'static, CoreError> {
    p.require(Action::ReadRuns)?;
    if after < 0 {
        return Err(CoreError::invalid("the event cursor must not be negative"));
    }
    let summary = runs.get_run(p, run).await?;
    if after > summary.version {
        return Err(CoreError::invalid(format!(
            "the event cursor {after} is past the end of the run (version {})",
            summary.version
        )));
    }
    // Subscribe before the replay so nothing committed in between is missed.
    let sub = runs.bus().subscribe(p.tenant, run).await?;
    let mut f = Follower {
        store: runs.log.store.clone(),
        tenant: p.tenant,
        run,
        cursor: after,
        pending: VecDeque::new(),
        sub,
        resync,
        done: false,
    };
    f.catch_up().await?;
    if f.pending.is_empty() && summary.status.is_terminal() {
        f.done = true;
    }
    Ok(futures::stream::unfold(f, |mut f| async move {
        let item = f.next().await;
        item.map(|i| (i, f))
    }))
}

impl Follower {
    /// Reads everything after the cursor (plus what is already queued) from the database.
    async fn catch_up(&mut self) -> Result<(), CoreError> {
        let mut from = self.pending.back().map_or(self.cursor, |e| e.version);
        loop {
            let page = self
                .store
                .read_stream(self.tenant, self.run, from, REPLAY_PAGE)
                .await?;
            let n = page.len();
            if let Some(last) = page.last() {
                from = last.version;
            }
            self.pending.extend(page);
            if n < REPLAY_PAGE as usize {
                return Ok(());
            }
        }
    }

    async fn next(&mut self) -> Option<Result<Envelope, CoreError>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                if e.version <= self.cursor {
                    continue;
                }
                self.cursor = e.version;
                if e.is_terminal() {
                    self.done = true;
                    self.pending.clear();
                }
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            match tokio::time::timeout(self.resync, self.sub.events.recv()).await {
                Ok(Some(e)) if e.version <= self.cursor => {}
                Ok(Some(e)) if e.version == self.cursor + 1 => self.pending.push_back(e),
                Ok(Some(_)) | Err(_) => {
                    // A gap, or silence: the database knows what was missed.
                    if let Err(err) = self.catch_up().await {
                        self.done = true;
                        return Some(Err(err));
                    }
                }
                Ok(None) => return None,
            }
        }
    }
}
