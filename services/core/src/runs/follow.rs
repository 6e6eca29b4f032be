//! Following a run's events live: subscribe first, replay from the database after the
//! client's cursor a page at a time (the first page read with the run itself), then forward live events in version order.
//! Duplicates (already sent) are dropped; a gap (a lost or reordered publish) sends the
//! follower back to the database, and so does silence longer than the resync interval, so
//! a lost publish costs latency, never an event. The stream ends after a terminal event
//! (for a run that had ended when the stream began: after its last event, since labels
//! may change after the end), after `run.deleted` (published when the run is deleted, or
//! made up by the follower when silence finds the run gone), or when the bus closes the
//! subscription because the subscriber fell behind (the client resumes from its cursor).
//!
//! Idle streams re-check the database with a backoff: the interval doubles after each
//! check that finds nothing, up to [`MAX_BACKOFF`] times the configured one, and resets
//! when an event arrives.
//!
//! [`follow_live`] also hands out the run's ephemeral deltas (token deltas) as they
//! arrive while the follower is live: never replayed, never part of the cursor, and never
//! a reason to re-read (silence is measured between durable events only). A delta of a
//! model step whose `model.completed` was already handed out is stale and dropped.

use super::commands::Runs;
use crate::error::CoreError;
use crate::model::{Action, Principal};
use crate::ports::{RunReader, Subscription};
use baton_events::{Decoded, MessageDelta, RunEvent, RunId, SharedEvent, TenantId};
use futures::{Stream, StreamExt};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Events read from the database per query; at most this many are held per follower.
const REPLAY_PAGE: u32 = 200;
/// How far an idle stream's resync interval may grow, as a multiple of the configured one.
pub const MAX_BACKOFF: u32 = 8;

struct Follower {
    store: Arc<dyn RunReader>,
    tenant: TenantId,
    run: RunId,
    /// Version of the last event handed out.
    cursor: i64,
    pending: VecDeque<SharedEvent>,
    sub: Subscription,
    /// The database may hold events after the cursor that the bus has not delivered.
    behind: bool,
    /// The last database check was caused by silence, not by a gap.
    silent: bool,
    resync: Duration,
    idle: Duration,
    /// When silence (no durable event) sends the follower back to the database; set
    /// while waiting live, so deltas arriving meanwhile do not postpone it.
    quiet_until: Option<Instant>,
    /// Hand out deltas (until the bus stops sending them).
    deltas: bool,
    /// The last model step, `(turn, step)`, whose `model.completed` was handed out.
    completed: Option<(i64, u32)>,
    /// The run had ended when the follower started: the stream ends at this version
    /// (labels may have been changed after the terminal event).
    end_at: Option<i64>,
    done: bool,
}

/// What a live follower hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum Live {
    /// A durable event, in version order, exactly once; shared with every other stream
    /// of the run on this replica.
    Event(SharedEvent),
    /// An ephemeral delta of a model reply still streaming; best effort.
    Delta(MessageDelta),
}

/// A stream of the run's events with `version > after`, live until the run ends; `None`
/// when the run has ended and the cursor is at its end (there will never be more).
pub async fn follow(
    runs: &Runs,
    p: &Principal,
    run: RunId,
    after: i64,
    resync: Duration,
) -> Result<Option<impl Stream<Item = Result<SharedEvent, CoreError>> + Send + 'static>, CoreError>
{
    let Some(f) = follower(runs, p, run, after, resync, false).await? else {
        return Ok(None);
    };
    Ok(Some(stream(f).filter_map(|item| {
        std::future::ready(match item {
            Ok(Live::Event(e)) => Some(Ok(e)),
            Ok(Live::Delta(_)) => None,
            Err(e) => Some(Err(e)),
        })
    })))
}

/// Like [`follow`], with the run's deltas interleaved as they arrive while the stream
/// is live (caught up with the database).
pub async fn follow_live(
    runs: &Runs,
    p: &Principal,
    run: RunId,
    after: i64,
    resync: Duration,
) -> Result<Option<impl Stream<Item = Result<Live, CoreError>> + Send + 'static>, CoreError> {
    Ok(follower(runs, p, run, after, resync, true)
        .await?
        .map(stream))
}

fn stream(f: Follower) -> impl Stream<Item = Result<Live, CoreError>> + Send + 'static {
    futures::stream::unfold(f, |mut f| async move {
        let item = f.next().await;
        item.map(|i| (i, f))
    })
}

async fn follower(
    runs: &Runs,
    p: &Principal,
    run: RunId,
    after: i64,
    resync: Duration,
    deltas: bool,
) -> Result<Option<Follower>, CoreError> {
    p.require(Action::ReadRuns)?;
    if after < 0 {
        return Err(CoreError::invalid("the event cursor must not be negative"));
    }
    // Subscribe before the replay so nothing committed in between is missed; the run
    // and the replay's first page are one read.
    let mut sub = runs.bus().subscribe(p.tenant, run).await?;
    if !deltas {
        // The bus drops deltas for a closed receiver without counting them as lost.
        sub.deltas.close();
    }
    let (summary, page) = runs
        .reader
        .run_and_events_after(p.tenant, run, after, REPLAY_PAGE)
        .await?
        .ok_or(CoreError::NotFound("run"))?;
    super::commands::check_cursor(after, &summary)?;
    if summary.status.is_terminal() && after == summary.version {
        return Ok(None);
    }
    Ok(Some(Follower {
        store: runs.reader.clone(),
        tenant: p.tenant,
        run,
        cursor: after,
        behind: page.len() == REPLAY_PAGE as usize,
        pending: page.into_iter().map(SharedEvent::from).collect(),
        sub,
        silent: false,
        resync,
        idle: resync,
        quiet_until: None,
        deltas,
        completed: None,
        end_at: summary.status.is_terminal().then_some(summary.version),
        done: false,
    }))
}

impl Follower {
    async fn next(&mut self) -> Option<Result<Live, CoreError>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                if e.version <= self.cursor {
                    continue;
                }
                self.cursor = e.version;
                // A run that had ended streams through its last event (labels changed
                // after the end included); one that ends while followed, through the
                // terminal event.
                let ends = e.event_type == "run.deleted"
                    || match self.end_at {
                        Some(end) => e.version >= end,
                        None => e.is_terminal(),
                    };
                if ends {
                    self.done = true;
                    self.pending.clear();
                }
                if self.deltas
                    && e.event_type == "model.completed"
                    && let Decoded::Known(RunEvent::ModelCompleted(m)) = e.decode()
                {
                    self.completed = self.completed.max(Some((m.turn, m.step)));
                }
                return Some(Ok(Live::Event(e)));
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
            let idle = self.idle;
            let quiet_until = *self
                .quiet_until
                .get_or_insert_with(|| Instant::now() + idle);
            let received = tokio::select! {
                // Durable events first, then the resync deadline: deltas, however many,
                // never delay either.
                biased;
                e = self.sub.events.recv() => Ok(e),
                () = tokio::time::sleep_until(quiet_until) => Err(()),
                d = self.sub.deltas.recv(), if self.deltas => {
                    match d {
                        // A tool call's progress comes after its step's reply.
                        Some(d)
                            if d.progress.is_some()
                                || self.completed < Some((d.turn, d.step)) =>
                        {
                            return Some(Ok(Live::Delta(d)));
                        }
                        // Stale: that step's full reply is out already.
                        Some(_) => {}
                        None => self.deltas = false,
                    }
                    continue;
                }
            };
            self.quiet_until = None;
            match received {
                Ok(Some(e)) if e.version <= self.cursor => {}
                Ok(Some(e)) if e.version == self.cursor + 1 => {
                    self.idle = self.resync;
                    self.pending.push_back(e);
                }
                // A gap: the database knows what the bus lost.
                Ok(Some(_)) => self.behind = true,
                Err(()) => {
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
            // Silence may be a deletion whose `run.deleted` the bus lost: the run's row
            // is gone with its events. End as that event would have.
            if self.store.get_run(self.tenant, self.run).await?.is_none() {
                let last = super::delete::tombstone(
                    self.tenant,
                    self.run,
                    self.cursor,
                    "",
                    "",
                    chrono::Utc::now(),
                );
                self.pending.push_back(last.into());
            }
        } else if !page.is_empty() {
            self.idle = self.resync;
        }
        self.pending.extend(page.into_iter().map(SharedEvent::from));
        Ok(())
    }
}
