//! The store contract suite: one generic `async fn` per behaviour, run against every
//! adapter — Postgres (a fresh database per test), SQLite (a temporary file per test)
//! and SQLite in memory — so the adapters cannot drift apart. Each case is its own test,
//! so `cargo nextest` runs them in parallel. `rls` holds the Postgres-only checks of
//! row-level security, `frozen` the Postgres-only bound on idle transactions.

mod api_keys;
mod audit;
mod checkpoints;
mod deletion;
mod directory;
mod egress;
mod environments;
mod frozen;
mod idempotency;
mod invitations;
mod leases;
mod mcp;
mod receipts;
mod retention;
mod rls;
mod schedules;
mod sealed;
mod search;
mod secrets;
mod stream_tickets;
mod streams;
mod support;
mod tenancy;
mod users;
mod webhooks;
mod workspace;

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
    stream_tickets::a_ticket_is_redeemed_once_before_it_expires,
    stream_tickets::of_redemptions_at_once_exactly_one_gets_the_ticket,
    stream_tickets::a_new_ticket_forgets_its_tenants_expired_ones,
    environments::environments_are_kept_by_name_within_their_tenant,
    workspace::contents_are_stored_once_and_go_when_no_file_holds_them,
    workspace::a_content_supplied_under_another_name_writes_nothing,
    workspace::a_deleted_run_takes_its_files_and_the_contents_only_it_held,
    workspace::another_tenants_workspace_is_invisible,
    webhooks::an_event_that_is_two_webhook_events_is_delivered_as_each,
    webhooks::an_append_enqueues_only_when_its_update_finds_a_subscribed_endpoint,
    mcp::servers_are_named_once_per_tenant_and_changed_by_version,
    mcp::discoveries_are_numbered_and_go_with_their_server,
    webhooks::finished_deliveries_past_their_window_are_pruned_and_pending_ones_stay,
    webhooks::deliveries_are_recorded_with_their_events_for_subscribed_enabled_endpoints,
    webhooks::a_delivery_is_leased_to_one_claimer_and_recorded_only_under_its_lease,
    schedules::a_schedule_round_trips_and_changes_only_from_the_version_read,
    schedules::schedules_stay_in_their_tenant_and_page_newest_first,
    schedules::due_schedules_are_found_across_tenants_soonest_first,
    deletion::a_deleted_run_leaves_no_row_and_the_tenants_other_runs_keep_theirs,
    deletion::a_run_under_a_lease_is_not_deleted,
    deletion::a_checkpoint_of_a_deleted_run_is_not_saved,
    retention::ended_runs_past_the_agents_days_else_the_tenants_are_expired,
    retention::an_expired_run_is_deleted_once_and_counted_in_its_tenants_progress,
    retention::idempotency_records_past_their_window_are_pruned_a_batch_at_a_time,
    retention::a_job_is_held_by_one_claimer_until_it_finishes_or_its_lease_expires,
    retention::a_run_under_a_live_lease_waits_and_one_whose_lease_lapsed_goes,
    audit::changes_and_their_entries_commit_together,
    audit::the_stream_pages_filters_and_stays_in_its_tenant,
    audit::entries_are_never_rewritten_or_deleted,
    streams::a_new_stream_reads_back_in_order,
    streams::a_long_append_reads_back_in_order,
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
    search::list_runs_answers_exactly_the_runs_each_filter_matches,
    directory::agents_round_trip_and_list_newest_first,
    directory::tenants_and_api_keys_round_trip,
    directory::agent_versions_are_kept_and_updates_must_follow_the_current_one,
    directory::concurrent_agent_updates_have_exactly_one_winner,
    directory::an_agent_is_archived_and_restored_once_each,
    directory::a_tool_is_archived_and_restored,
    directory::tool_versions_are_kept_and_updates_must_follow_the_current_one,
    directory::a_tool_an_older_replica_wrote_is_found_at_its_version_and_kept_on_update,
    directory::archived_agents_and_tools_are_deleted_with_their_versions_unless_a_live_run_uses_them,
    directory::tools_round_trip_list_newest_first_and_are_unique_by_name,
    directory::another_tenants_tools_are_invisible_and_their_names_free,
    receipts::an_approved_call_moves_through_approval_intent_and_result,
    receipts::a_denied_call_stays_denied_after_its_result,
    receipts::an_uncertain_call_is_resolved_and_retried,
    receipts::a_result_without_an_intent_records_a_call_that_never_ran,
    receipts::a_client_tool_holds_the_run_until_the_client_answers,
    receipts::the_events_of_one_append_see_each_others_receipts,
    receipts::receipts_list_in_the_order_they_were_created,
    receipts::receipts_are_scoped_by_tenant,
    receipts::the_installation_counts_cover_every_tenant,
    receipts::an_unreadable_receipt_is_reported_and_blocks_its_call,
    receipts::a_model_reply_with_content_adds_an_assistant_message,
    leases::only_runs_with_work_are_claimed_and_a_live_lease_is_not_taken,
    leases::an_expired_lease_is_adopted_with_a_higher_epoch,
    leases::expired_leases_are_adopted_at_once_by_the_next_claim,
    leases::renewal_returns_exactly_the_leases_still_held,
    leases::an_append_under_a_stale_lease_is_fenced_and_writes_nothing,
    leases::an_append_can_release_its_lease_in_the_same_transaction,
    leases::concurrent_claimers_never_claim_one_run_twice,
    leases::release_needs_the_current_epoch,
    leases::a_handed_off_lease_is_claimed_at_once_as_a_hand_off_and_fences_its_owner,
    leases::an_append_against_a_base_checks_the_version_and_the_fence_as_a_locked_one_does,
    secrets::a_secret_round_trips_sealed_bytes_and_metadata,
    secrets::putting_a_taken_name_replaces_the_value_and_keeps_created_at,
    secrets::secrets_list_as_metadata_in_name_order_with_a_cursor,
    secrets::delete_reports_whether_the_secret_existed,
    secrets::another_tenant_can_neither_read_list_nor_delete_a_secret,
    secrets::a_secret_of_an_unknown_tenant_is_not_found,
    checkpoints::checkpoints_round_trip_newest_first_and_list_without_contents,
    checkpoints::another_tenants_checkpoints_are_invisible,
    sealed::key_usage_counts_secrets_and_checkpoints_per_key_for_a_tenant_or_all,
    sealed::records_not_under_a_key_page_in_key_order_within_a_tenant_when_asked,
    sealed::a_swap_writes_only_the_rows_that_still_hold_what_was_read,
    api_keys::api_keys_keep_their_creator_and_list_newest_first,
    api_keys::another_tenants_api_keys_are_invisible_and_untouchable,
    api_keys::a_key_is_revoked_once_and_keeps_its_first_revocation,
    api_keys::a_use_is_recorded_only_when_the_last_one_is_stale,
    api_keys::racing_replicas_record_one_use,
    users::users_round_trip_and_their_emails_are_unique,
    users::memberships_stay_within_their_tenant,
    users::members_list_in_email_order_with_a_cursor,
    users::the_last_owner_is_neither_removed_nor_demoted,
    users::two_owners_demoting_each_other_at_once_leave_one,
    users::sessions_are_found_by_hash_and_revoked_once,
    users::a_login_purges_only_that_users_expired_sessions,
    invitations::invitations_list_newest_first_one_pending_per_email_and_stay_in_their_tenant,
    invitations::accepting_makes_the_membership_and_its_entry_together,
    invitations::only_the_invited_email_decides_and_only_before_expiry,
    invitations::accepting_as_a_member_already_writes_nothing,
    invitations::racing_decisions_on_one_invitation_have_one_winner,
    egress::an_allowlist_is_replaced_whole_and_stays_in_its_tenant,
);
