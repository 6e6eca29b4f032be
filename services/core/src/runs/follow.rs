//! Following a run's events live: subscribe first, replay from the database after the
//! client's cursor a page at a time, then forward live events in version order.
//! Duplicates (already sent) are dropped; a gap (a lost or reordered publish) sends the
//! follower back to the database, and so does silence longer than the resync interval, so
//! a lost publish costs latency, never an event. The stream ends after a terminal event,
//! or when the bus closes the subscription because the subscriber fell behind (the client
//! resumes from its cursor).
//!
//! Idle streams re-check the database with a backoff: the interval doubles after each
//! check that finds nothing, up to [`MAX_BACKOFF`] times the configured one, and resets
//! when an event arrives.

use super::Runs;
use crate::auth::{Action, Principal};
use crate::error::CoreError;
use crate::ports::{RunStore, Subscription};
use baton_events::{Envelope, RunId, TenantId};
use futures::Stream;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Events read from the database per query; at most this many are held per follower.
const REPLAY_PAGE: u32 = 200;
/// How far an idle stream's resync interval may grow, as a multiple of the configured one.
pub const MAX_BACKOFF: u32 = 8;

struct Follower {
    store: Arc<dyn RunStore>,
    tenant: TenantId,
    run: RunId,
    /// Version of the last event handed out.
    cursor: i64,
    pending: VecDeque<Envelope>,
    sub: Subscription,
    /// The database may hold events after the cursor that the bus has not delivered.
    behind: bool,
    /// The last database check was caused by silence, not by a gap.
    silent: bool,
    resync: Duration,
    idle: Duration,
    done: bool,
}

/// A stream of the run's events with `version > after`, live until the run ends; `None`
/// when the run has ended and the cursor is at its end (there will never be more).
pub async fn follow(
    runs: &Runs,
    p: &Principal,
    run: RunId,
    after: i64,
    resync: Duration,
) -> Result<Option<impl Stream<Item = Result<Envelope, CoreError>> + Send + 'static>, CoreError> {
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
    if summary.status.is_terminal() && after == summary.version {
        return Ok(None);
    }
    // Subscribe before the replay so nothing committed in between is missed.
    let sub = runs.bus().subscribe(p.tenant, run).await?;
    let f = Follower {
        store: runs.log.store.clone(),
        tenant: p.tenant,
        run,
        cursor: after,
        pending: VecDeque::new(),
        sub,
        behind: true,
        silent: false,
        resync,
        idle: resync,
        done: false,
    };
    Ok(Some(futures::stream::unfold(f, |mut f| async move {
        let item = f.next().await;
        item.map(|i| (i, f))
    })))
}

impl Follower {
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
            if self.behind {
                if let Err(err) = self.read_page().await {
                    self.done = true;
                    return Some(Err(err));
                }
                continue;
            }
            match tokio::time::timeout(self.idle, self.sub.events.recv()).await {
                Ok(Some(e)) if e.version <= self.cursor => {}
                Ok(Some(e)) if e.version == self.cursor + 1 => {
                    self.idle = self.resync;
                    self.pending.push_back(e);
                }
                // A gap: the database knows what the bus lost.
                Ok(Some(_)) => self.behind = true,
                Err(_) => {
                    self.behind = true;
                    self.silent = true;
                }
                Ok(None) => return None,
            }
        }
    }

    /// Reads the next page after the cursor; caught up when the page is short.
    async fn read_page(&mut self) -> Result<(), CoreError> {
        let page = self
            .store
            .read_stream(self.tenant, self.run, self.cursor, REPLAY_PAGE)
            .await?;
        self.behind = page.len() == REPLAY_PAGE as usize;
        if std::mem::take(&mut self.silent) && page.is_empty() {
            self.idle = (self.idle * 2).min(self.resync * MAX_BACKOFF);
        } else if !page.is_empty() {
            self.idle = self.resync;
        }
        self.pending.extend(page);
        Ok(())
    }
}
