//! A replica frozen in the middle of a transaction (SIGSTOP, a paused VM, a stalled
//! network) keeps the row locks the transaction took, and lease claims skip locked rows:
//! without a bound on idle transactions its runs would never be adopted. Postgres only
//! (SQLite serializes writers and has no row locks); every connection carries the
//! statement timeout as `idle_in_transaction_session_timeout` too.

use crate::support::*;
use baton_core::ports::LeaseStore;
use baton_store::{PgOptions, PgStore, PoolKind, Scope};
use std::time::{Duration, Instant};

/// The timeout of the store under test: short, so the test is.
const TIMEOUT: Duration = Duration::from_millis(1500);
const TTL: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_transactions_locks_end_and_its_run_is_adopted() {
    let pg = pg().await;
    let mut opts = PgOptions::new(pg.url());
    opts.statement_timeout = TIMEOUT;
    let s = PgStore::connect(&opts).await.expect("connect");
    let tenant = tenant(&s).await;
    let (run, _) = run_in_turn(&s, tenant).await;
    // The frozen replica held the run's lease, which has expired since.
    let held = s
        .claim_runs("frozen/1", TTL, now(), 1, Some((tenant, run)))
        .await
        .expect("claim");
    assert_eq!(held.len(), 1);

    // ... and was frozen inside a transaction that locked the run's row, as an append does.
    let mut frozen = s
        .transaction(PoolKind::App, Scope::Tenant(tenant))
        .await
        .expect("transaction");
    sqlx::query("SELECT version FROM runs WHERE id = $1 FOR UPDATE")
        .bind(run.as_uuid())
        .execute(&mut *frozen)
        .await
        .expect("lock the run row");
    let frozen_at = Instant::now();

    let later = now() + chrono::Duration::seconds(1);
    let skipped = s
        .claim_runs("adopter/2", Duration::from_secs(30), later, 10, None)
        .await
        .expect("claim");
    assert!(skipped.is_empty(), "the locked row is skipped: {skipped:?}");

    let mut adopted = Vec::new();
    while adopted.is_empty() && frozen_at.elapsed() < TIMEOUT * 8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        adopted = s
            .claim_runs("adopter/2", Duration::from_secs(30), now(), 10, None)
            .await
            .expect("claim");
    }
    assert_eq!(
        adopted.iter().map(|c| c.run).collect::<Vec<_>>(),
        [run],
        "the run is adopted once Postgres ends the frozen session"
    );
    assert!(
        frozen_at.elapsed() >= TIMEOUT,
        "not before the frozen transaction's idle time ran out"
    );
    // The frozen session is gone: when its replica wakes, its transaction fails.
    let woke = sqlx::query("SELECT 1").execute(&mut *frozen).await;
    assert!(woke.is_err(), "{woke:?}");
    drop(frozen);
    s.close().await;
    pg.finish().await;
}
