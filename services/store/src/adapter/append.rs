//! `EventLog` for both adapters: one transaction that stores the idempotency
//! record first (a concurrent duplicate blocks on its key and then fails), checks the
//! stream version with the run row locked, and writes the events with the runs,
//! messages and receipts (`receipts.rs`) projections, on the `app` pool and scoped to the
//! appending tenant. How the row is locked is the backend's, passed in by
//! [`super::impl_ports!`].

/// Implements the append transaction as `$store::append_events` (a `$db` store); driver
/// errors are mapped with `$classify`, and `$lock_run` ends the `SELECT` that reads the run
/// to lock its row (empty when the write transaction already holds the lock).
macro_rules! impl_append {
    ($store:ty, $db:ty, $classify:path, $lock_run:literal) => {
        const _: () = {
            use baton_core::StoreError;
            use baton_core::model::RunSummary;
            use baton_core::ports::{
                AppendOutcome, AppendRequest, EventLog, IdempotencyRecord, Release, RunReader,
            };
            use baton_events::TenantId;
            use sqlx::types::Json;
            use $crate::plan::{self, AppendError, AppendPlan, bind_run};
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{RunRow, run_columns};

            type Connection = <$db as sqlx::Database>::Connection;

            $crate::adapter::receipts_projection!($db, $classify);

            #[async_trait::async_trait]
            impl EventLog for $store {
                #[tracing::instrument(name = "store.append", skip_all)]
                async fn append(
                    &self,
                    tenant: TenantId,
                    req: AppendRequest,
                ) -> Result<AppendOutcome, StoreError> {
                    self.append_events(tenant, req).await
                }
            }

            impl $store {
                async fn append_events(
                    &self,
                    tenant: TenantId,
                    req: AppendRequest,
                ) -> Result<AppendOutcome, StoreError> {
                    plan::validate(tenant, &req)?;
                    let mut tx = self
                        .pools
                        .write(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    if let Some(rec) = &req.idempotency
                        && let Err(e) = insert_idempotency(&mut tx, tenant, rec, &req).await
                    {
                        // The record is read after the rollback, from a fresh snapshot
                        // (on another pooled connection: this one goes back first).
                        let _ = tx.rollback().await;
                        return match $classify(e) {
                            StoreError::Conflict { .. } => {
                                self.duplicate(tenant, &rec.request_id).await
                            }
                            other => Err(other),
                        };
                    }
                    match write(&mut tx, tenant, &req).await {
                        Ok(outcome) => {
                            tx.commit().await.map_err($classify)?;
                            Ok(outcome)
                        }
                        Err(AppendError::Store(e)) => {
                            let _ = tx.rollback().await;
                            Err(e)
                        }
                        Err(AppendError::Raced) => {
                            let _ = tx.rollback().await;
                            Err(self.lost_race(tenant, &req).await)
                        }
                    }
                }

                async fn duplicate(
                    &self,
                    tenant: TenantId,
                    request_id: &str,
                ) -> Result<AppendOutcome, StoreError> {
                    match self.find_idempotency(tenant, request_id).await? {
                        Some(rec) => Ok(AppendOutcome::Duplicate(rec)),
                        None => Err(StoreError::Other(format!(
                            "request_id {request_id:?} collided with a record that is gone"
                        ))),
                    }
                }

                /// The precise conflict after another writer won: the stream's committed
                /// version.
                async fn lost_race(&self, tenant: TenantId, req: &AppendRequest) -> StoreError {
                    let scoped = self.pools.read(PoolKind::App, Scope::Tenant(tenant));
                    let mut conn = match scoped.await {
                        Ok(conn) => conn,
                        Err(e) => return e,
                    };
                    let actual: Result<Option<i64>, _> = sqlx::query_scalar(
                        "SELECT version FROM runs WHERE id = $1 AND tenant_id = $2",
                    )
                    .bind(req.run.as_uuid())
                    .bind(tenant.as_uuid())
                    .fetch_optional(&mut *conn)
                    .await;
                    match actual {
                        Ok(Some(actual)) => StoreError::Conflict {
                            expected: req.expected_version,
                            actual,
                        },
                        Ok(None) => {
                            StoreError::Other(format!("run id {} is already taken", req.run))
                        }
                        Err(e) => $classify(e),
                    }
                }
            }

            async fn insert_idempotency(
                conn: &mut Connection,
                tenant: TenantId,
                rec: &IdempotencyRecord,
                req: &AppendRequest,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO idempotency \
                     (tenant_id, request_id, command, fingerprint, response, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(tenant.as_uuid())
                .bind(&rec.request_id)
                .bind(&rec.command)
                .bind(&rec.fingerprint)
                .bind(Json(&rec.response))
                .bind(plan::micros(req.at))
                .execute(conn)
                .await
                .map(|_| ())
            }

            /// Everything after the idempotency record; any error leaves the transaction to
            /// roll back.
            async fn write(
                conn: &mut Connection,
                tenant: TenantId,
                req: &AppendRequest,
            ) -> Result<AppendOutcome, AppendError> {
                let plan = if req.expected_version == 0 {
                    let plan = plan::plan(plan::new_stream(tenant, req), req)?;
                    bind_run!(
                        sqlx::query(concat!(
                            "INSERT INTO runs (",
                            run_columns!(),
                            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
                        )),
                        &plan.summary
                    )
                    .execute(&mut *conn)
                    .await
                    .map_err($classify)?;
                    plan
                } else {
                    let current = lock_run(conn, tenant, req).await?;
                    if let Some(fence) = &req.fence {
                        check_fence(conn, req, fence).await?;
                    }
                    if current.version != req.expected_version {
                        return Err(AppendError::Store(StoreError::Conflict {
                            expected: req.expected_version,
                            actual: current.version,
                        }));
                    }
                    let plan = plan::plan(current, req)?;
                    let updated = bind_run!(
                        sqlx::query(
                            "UPDATE runs SET id = $1, tenant_id = $2, agent_id = $3, \
                             agent_version = $4, title = $5, status = $6, version = $7, \
                             message_count = $8, turn_count = $9, cancel_requested = $10, \
                             pending_actions = $11, last_error = $12, created_at = $13, \
                             updated_at = $14 \
                             WHERE id = $1 AND tenant_id = $2 AND version = $15"
                        ),
                        &plan.summary
                    )
                    .bind(req.expected_version)
                    .execute(&mut *conn)
                    .await
                    .map_err($classify)?;
                    if updated.rows_affected() != 1 {
                        return Err(AppendError::Raced);
                    }
                    match (req.release, &req.fence) {
                        (Some(Release::Idle), Some(_)) => {
                            sqlx::query(
                                "UPDATE runs SET lease_owner = NULL, lease_expires_ms = NULL \
                                 WHERE id = $1",
                            )
                            .bind(req.run.as_uuid())
                            .execute(&mut *conn)
                            .await
                            .map_err($classify)?;
                        }
                        // The owner stays, with expiry 0: free to claim at once, and
                        // the claimer knows it is a hand-off.
                        (Some(Release::HandOff), Some(_)) => {
                            sqlx::query("UPDATE runs SET lease_expires_ms = 0 WHERE id = $1")
                                .bind(req.run.as_uuid())
                                .execute(&mut *conn)
                                .await
                                .map_err($classify)?;
                        }
                        _ => {}
                    }
                    plan
                };
                let events = insert_rows(conn, tenant, &plan).await?;
                project_receipts(conn, tenant, req, &plan).await?;
                Ok(AppendOutcome::Appended {
                    run: Box::new(plan.summary),
                    events,
                })
            }

            /// The run's projection, locked until the transaction ends; `NotFound` for a
            /// run that does not exist in this tenant.
            async fn lock_run(
                conn: &mut Connection,
                tenant: TenantId,
                req: &AppendRequest,
            ) -> Result<RunSummary, AppendError> {
                let row: Option<RunRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    run_columns!(),
                    " FROM runs WHERE id = $1 AND tenant_id = $2",
                    $lock_run
                ))
                .bind(req.run.as_uuid())
                .bind(tenant.as_uuid())
                .fetch_optional(&mut *conn)
                .await
                .map_err($classify)?;
                let row = row.ok_or(AppendError::Store(StoreError::NotFound))?;
                Ok(RunSummary::try_from(row)?)
            }

            /// `Fenced` unless the (locked) run's lease is still exactly `fence`: a replica
            /// that lost its lease can never land an event.
            async fn check_fence(
                conn: &mut Connection,
                req: &AppendRequest,
                fence: &baton_core::ports::Fence,
            ) -> Result<(), AppendError> {
                let (owner, epoch, expires): (Option<String>, i64, Option<i64>) = sqlx::query_as(
                    "SELECT lease_owner, lease_epoch, lease_expires_ms FROM runs WHERE id = $1",
                )
                .bind(req.run.as_uuid())
                .fetch_one(&mut *conn)
                .await
                .map_err($classify)?;
                // Expiry 0 marks a lease handed off: its owner may not write any more.
                let handed_off = expires == Some(0);
                if owner.as_deref() == Some(fence.owner.as_str())
                    && epoch == fence.epoch
                    && !handed_off
                {
                    Ok(())
                } else {
                    Err(AppendError::Store(StoreError::Fenced))
                }
            }

            /// Inserts the planned events and message rows; returns the stored envelopes.
            async fn insert_rows(
                conn: &mut Connection,
                tenant: TenantId,
                plan: &AppendPlan,
            ) -> Result<Vec<baton_events::Envelope>, AppendError> {
                let mut envelopes = Vec::with_capacity(plan.events.len());
                for e in &plan.events {
                    let position: i64 = sqlx::query_scalar(
                        "INSERT INTO events \
                         (tenant_id, stream_id, version, id, type, schema, data, meta, \
                         recorded_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING position",
                    )
                    .bind(tenant.as_uuid())
                    .bind(plan.summary.id.as_uuid())
                    .bind(e.version)
                    .bind(e.id.as_uuid())
                    .bind(e.event_type)
                    .bind(e.schema)
                    .bind(Json(&e.data))
                    .bind(Json(&e.meta))
                    .bind(plan.at)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err($classify)?;
                    envelopes.push(e.envelope(plan, position));
                }
                for m in &plan.messages {
                    sqlx::query(
                        "INSERT INTO messages \
                         (tenant_id, run_id, seq, id, role, content, version, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    )
                    .bind(tenant.as_uuid())
                    .bind(m.run_id.as_uuid())
                    .bind(m.seq)
                    .bind(m.id.as_uuid())
                    .bind(m.role.as_str())
                    .bind(&m.content)
                    .bind(m.version)
                    .bind(m.created_at)
                    .execute(&mut *conn)
                    .await
                    .map_err($classify)?;
                }
                Ok(envelopes)
            }
        };
    };
}
pub(crate) use impl_append;
