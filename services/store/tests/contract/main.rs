//! The store contract suite: one generic `async fn` per behaviour, run against every
//! adapter — Postgres (a fresh database per test), SQLite (a temporary file per test)
//! and SQLite in memory — so the adapters cannot drift apart. Each case is its own test,
//! so `cargo nextest` runs them in parallel.

mod directory;
mod idempotency;
mod leases;
mod streams;
mod support;
mod tenancy;

/// Generates, for every listed behaviour, one test per backend.
macro_rules! contract {
    ($($module:ident :: $name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let backend = crate::support::pg().await;
                    crate::$module::$name(&backend.store).await;
                    backend.finish().await;
                }
            )*
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let backend = crate::support::sqlite().await;
                    crate::$module::$name(&backend.store).await;
                }
            )*
        }

        mod sqlite_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let store = crate::support::sqlite_memory().await;
                    crate::$module::$name(&store).await;
                }
            )*
        }
    };
}

contract!(
    streams::a_new_stream_reads_back_in_order,
    streams::a_new_stream_must_start_with_run_created,
    streams::an_append_at_a_stale_version_is_a_conflict_and_writes_nothing,
    streams::concurrent_appends_at_one_version_have_exactly_one_winner,
    streams::reading_from_a_version_respects_the_limit,
    streams::projections_match_a_fold_of_the_events,
    streams::unknown_event_types_read_back_as_raw_json,
    streams::a_terminal_run_stores_events_but_counts_no_more_messages,
    idempotency::a_repeated_idempotent_append_returns_the_original_and_writes_nothing,
    idempotency::a_failed_append_keeps_no_idempotency_record,
    idempotency::racing_appends_with_one_request_id_store_exactly_one,
    idempotency::request_ids_are_scoped_by_tenant,
    tenancy::another_tenants_data_is_invisible,
    tenancy::list_runs_filters_by_status_and_pages_with_a_cursor,
    tenancy::runs_with_work_are_claimed_across_tenants_oldest_first,
    tenancy::ping_answers,
    directory::agents_round_trip_and_list_newest_first,
    directory::tenants_and_api_keys_round_trip,
    leases::only_runs_with_work_are_claimed_and_a_live_lease_is_not_taken,
    leases::an_expired_lease_is_adopted_with_a_higher_epoch,
    leases::renewal_returns_exactly_the_leases_still_held,
    leases::an_append_under_a_stale_lease_is_fenced_and_writes_nothing,
    leases::an_append_can_release_its_lease_in_the_same_transaction,
    leases::concurrent_claimers_never_claim_one_run_twice,
    leases::release_needs_the_current_epoch,
    leases::a_handed_off_lease_is_claimed_at_once_as_a_hand_off_and_fences_its_owner,
);
